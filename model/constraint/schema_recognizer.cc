#include "model/constraint/schema_recognizer.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "model/constraint/json_recognizer.h"
#include "model/constraint/schema_stepper.h"

namespace mlaserve::model::schema_internal {
namespace {

using json_internal::kMaxDepth;

// Levels of a state: containers, plus the pending value / key / scalar on top.
constexpr int kMaxLevels = kMaxDepth + 2;

bool IsChain(const SchemaState& s) { return s[0].phase == kChainLayout; }

// The input state's graph, read in place: level j's header at level_at[j], its entries after it,
// each followed by ParentWords(j) kParents frames, its parents' bitset; in the chain layout
// level j is the frame at 1 + j.
class Graph {
 public:
  explicit Graph(const SchemaState& s) : s_(s) {
    if (s.empty()) return;
    chain_ = IsChain(s);
    if (chain_) {
      levels_ = s[0].node;
      return;
    }
    uint32_t i = 1;
    for (uint16_t j = 0; j < s[0].node; ++j) {
      const uint32_t below = j == 0 ? 0 : s[level_at_[j - 1]].node;
      words_[j] = below <= 1 ? 0 : (below + 63) / 64;
      level_at_[levels_++] = i;
      i += 1 + s[i].node * (1 + words_[j]);
    }
  }
  bool done() const { return !s_.empty() && s_[0].flags != 0; }
  uint32_t levels() const { return levels_; }
  bool chain() const { return chain_; }
  uint32_t count(uint32_t j) const { return chain_ ? 1 : s_[level_at_[j]].node; }
  // Level 0 has no parents; an entry over a level of one entry has it (implied, no words).
  uint32_t ParentWords(uint32_t j) const { return chain_ ? 0 : words_[j]; }
  // The index in the state of entry k of level j's frame.
  uint32_t EntryAt(uint32_t j, uint32_t k) const {
    return chain_ ? 1 + j : level_at_[j] + 1 + k * (1 + ParentWords(j));
  }
  const Frame& frame(uint32_t j, uint32_t k) const { return s_[EntryAt(j, k)]; }
  // Level j's frames in the graph layout (its header first); begin_of(levels()) is the end.
  SchemaState::const_iterator begin_of(uint32_t j) const {
    return s_.begin() + (j < levels_ ? level_at_[j] : s_.size());
  }
  // Calls fn(k) for each parent k (at level j - 1) of entry k of level j >= 1.
  template <typename Fn>
  void ForEachParent(uint32_t j, uint32_t k, Fn fn) const {
    const uint32_t words = ParentWords(j);
    if (words == 0) return fn(0u);
    const Frame* w = &s_[EntryAt(j, k) + 1];
    for (uint32_t i = 0; i < words; ++i) {
      for (uint64_t bits = w[i].value; bits != 0; bits &= bits - 1) {
        fn(i * 64 + static_cast<uint32_t>(__builtin_ctzll(bits)));
      }
    }
  }
  void OrParents(uint32_t j, uint32_t k, uint64_t* into) const {
    const uint32_t words = ParentWords(j);
    if (words == 0) {
      into[0] |= 1;
      return;
    }
    const Frame* w = &s_[EntryAt(j, k) + 1];
    for (uint32_t i = 0; i < words; ++i) into[i] |= w[i].value;
  }

 private:
  const SchemaState& s_;
  bool chain_ = false;
  uint32_t levels_ = 0;
  uint32_t level_at_[kMaxLevels];
  uint32_t words_[kMaxLevels];
};

// Bitsets per level, words of 64.
struct LevelBits {
  std::vector<uint64_t> bits;
  std::vector<uint32_t> at;  // level j's words start at at[j]
  void Reset(const Graph& g) {
    at.clear();
    uint32_t total = 0;
    for (uint32_t j = 0; j < g.levels(); ++j) {
      at.push_back(total);
      total += (g.count(j) + 63) / 64;
    }
    bits.assign(total, 0);
  }
  uint64_t* level(uint32_t j) { return bits.data() + at[j]; }
  bool test(uint32_t j, uint32_t k) const { return (bits[at[j] + k / 64] >> (k % 64)) & 1; }
};

bool FrameLess(const Frame& a, const Frame& b) { return std::memcmp(&a, &b, sizeof(Frame)) < 0; }

// Per-thread buffers of Step (their capacity is kept between calls).
struct Scratch {
  Emitter em;
  LevelBits under, kept;
  struct Candidate {
    Frame frame;
    int32_t source;  // reading index, or -1 - k for kept input entry k
  };
  std::vector<Candidate> cands;
  std::vector<uint32_t> in_to_out, prev_in_to_out, reading_out, order, out_of;
  std::vector<uint64_t> words;
};
Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

// The canonical graph of the readings emitted over `in` (see the header's State): input entries
// still under some reading kept, each level's entries with equal frames merged (their parents
// joined) and sorted by their bytes, parents as bitsets. Levels below every window whose
// entries are all kept are copied as they are.
void Build(const Graph& in, Scratch& sc, SchemaState& out) {
  const Emitter& em = sc.em;
  out.clear();
  bool done = false;
  uint32_t levels = 0, lowest = UINT32_MAX;
  sc.kept.Reset(in);
  for (const Emitted& r : em.readings) {
    if (r.done) done = true;
    if (r.n == 0) continue;
    levels = std::max<uint32_t>(levels, r.bottom + r.n);
    lowest = std::min<uint32_t>(lowest, r.bottom);
    if (r.bottom > 0) in.OrParents(r.bottom, r.base, sc.kept.level(r.bottom - 1));
  }
  for (uint32_t j = in.levels(); j-- > 1;) {
    for (uint32_t k = 0; k < in.count(j); ++k) {
      if (sc.kept.test(j, k)) in.OrParents(j, k, sc.kept.level(j - 1));
    }
  }
  Frame header;
  header.flags = done ? 1 : 0;
  header.node = static_cast<uint16_t>(levels);
  out.push_back(header);
  if (levels == 0) {
    if (done) {
      out[0].phase = kChainLayout;
    } else {
      out.clear();
    }
    return;
  }
  // Levels copied as they are.
  uint32_t same = 0;
  while (same < lowest && same < in.levels()) {
    bool all = true;
    for (uint32_t k = 0; k < in.count(same) && all; ++k) all = sc.kept.test(same, k);
    if (!all) break;
    ++same;
  }
  if (same > 0 && !in.chain()) {
    out.insert(out.end(), in.begin_of(0), in.begin_of(same));
  } else {
    Frame level;
    level.node = 1;
    for (uint32_t j = 0; j < same; ++j) {
      out.push_back(level);
      out.push_back(in.frame(j, 0));
    }
  }
  sc.reading_out.assign(em.readings.size(), 0);
  sc.prev_in_to_out.clear();
  uint32_t below = 0;  // entries of the output level below
  if (same > 0) {
    below = in.count(same - 1);
    for (uint32_t k = 0; k < below; ++k) sc.prev_in_to_out.push_back(k);
  }
  for (uint32_t j = same; j < levels; ++j) {
    sc.cands.clear();
    if (j < in.levels()) {
      for (uint32_t k = 0; k < in.count(j); ++k) {
        if (sc.kept.test(j, k)) sc.cands.push_back({in.frame(j, k), -1 - static_cast<int32_t>(k)});
      }
    }
    for (size_t r = 0; r < em.readings.size(); ++r) {
      const Emitted& e = em.readings[r];
      if (j >= e.bottom && j < e.bottom + e.n) {
        sc.cands.push_back({em.frames[e.first + (j - e.bottom)], static_cast<int32_t>(r)});
      }
    }
    sc.order.resize(sc.cands.size());
    for (uint32_t i = 0; i < sc.order.size(); ++i) sc.order[i] = i;
    auto less = [&](uint32_t a, uint32_t b) {
      return FrameLess(sc.cands[a].frame, sc.cands[b].frame);
    };
    // Windows over sorted input entries often emit in order already.
    if (!std::is_sorted(sc.order.begin(), sc.order.end(), less)) {
      std::sort(sc.order.begin(), sc.order.end(), less);
    }
    sc.out_of.assign(sc.cands.size(), 0);
    uint32_t count = 0;
    for (size_t i = 0; i < sc.order.size(); ++i) {
      if (i > 0 && FrameLess(sc.cands[sc.order[i - 1]].frame, sc.cands[sc.order[i]].frame)) ++count;
      sc.out_of[sc.order[i]] = count;
    }
    if (!sc.order.empty()) ++count;
    const uint32_t nw = j == 0 || below == 1 ? 0 : (below + 63) / 64;
    const uint32_t stride = std::max<uint32_t>(nw, 1);
    sc.words.assign(static_cast<size_t>(count) * stride, 0);
    sc.in_to_out.assign(j < in.levels() ? in.count(j) : 0, 0);
    for (size_t c = 0; c < sc.cands.size(); ++c) {
      const Scratch::Candidate& cand = sc.cands[c];
      const uint32_t o = sc.out_of[c];
      uint64_t* w = &sc.words[static_cast<size_t>(o) * stride];
      auto add = [&](uint32_t parent) { w[parent / 64] |= uint64_t{1} << (parent % 64); };
      if (cand.source < 0) {
        const uint32_t k = static_cast<uint32_t>(-1 - cand.source);
        sc.in_to_out[k] = o;
        if (nw > 0) in.ForEachParent(j, k, [&](uint32_t p) { add(sc.prev_in_to_out[p]); });
      } else {
        const Emitted& e = em.readings[cand.source];
        if (nw > 0) {
          if (j == e.bottom) {
            in.ForEachParent(j, e.base, [&](uint32_t p) { add(sc.prev_in_to_out[p]); });
          } else {
            add(sc.reading_out[cand.source]);
          }
        }
        sc.reading_out[cand.source] = o;
      }
    }
    Frame level;
    level.node = static_cast<uint16_t>(count);
    out.push_back(level);
    for (size_t i = 0; i < sc.order.size(); ++i) {
      if (i > 0 && sc.out_of[sc.order[i]] == sc.out_of[sc.order[i - 1]]) continue;
      out.push_back(sc.cands[sc.order[i]].frame);
      const uint64_t* w = &sc.words[static_cast<size_t>(sc.out_of[sc.order[i]]) * stride];
      for (uint32_t x = 0; x < nw; ++x) {
        Frame parents;
        parents.kind = FrameKind::kParents;
        parents.value = w[x];
        out.push_back(parents);
      }
    }
    sc.prev_in_to_out.swap(sc.in_to_out);
    below = count;
  }
  // One frame per level (a union resolved): the chain layout, without level headers.
  if (out.size() == 1 + 2 * static_cast<size_t>(levels)) {
    for (uint32_t j = 0; j < levels; ++j) out[1 + j] = out[2 + 2 * j];
    out.resize(1 + levels);
    out[0].phase = kChainLayout;
  }
}

// Entries of `g` that are some reading's top: no entry of the level above stands on them.
void MarkTops(const Graph& g, LevelBits& under) {
  under.Reset(g);
  for (uint32_t j = 1; j < g.levels(); ++j) {
    for (uint32_t k = 0; k < g.count(j); ++k) g.OrParents(j, k, under.level(j - 1));
  }
}

// The window of a reading whose top is entry (j, k), its frames from level `bottom` up.
void LoadWindow(const Graph& g, uint32_t bottom, int32_t base, const uint32_t* ks, uint32_t n,
                Work& w) {
  w.done = false;
  w.bottom = static_cast<uint8_t>(bottom);
  w.base = base;
  w.n = 0;
  w.depth = static_cast<uint8_t>(bottom);
  for (uint32_t i = 0; i < n; ++i) {
    Frame f = g.frame(bottom + i, ks[i]);
    if (IsContainer(f.kind)) ++w.depth;
    if (CountsWhitespace(f.kind)) f.aux = 0;
    w.Push(f);
  }
  const Frame& top = g.frame(bottom + n - 1, ks[n - 1]);
  w.ws = CountsWhitespace(top.kind) ? top.aux : 0;
}

// A state of one reading (every level one frame, so no parent words) steps without the graph:
// its window is its top three frames, and when the byte leaves one reading the levels below the
// window are copied as they are. This is most steps (inside strings, keys, numbers).
bool StepChain(const Stepper& stepper, const SchemaState& in, uint8_t b, SchemaState& out) {
  const uint32_t levels = in[0].node;
  if (levels == 0) {  // complete: nothing may follow
    out.clear();
    return false;
  }
  const uint32_t bottom = levels > 3 ? levels - 3 : 0;
  auto load = [&](Work& w) {
    w.done = false;
    w.bottom = static_cast<uint8_t>(bottom);
    w.base = bottom > 0 ? 0 : -1;
    w.n = static_cast<uint16_t>(levels - bottom);
    w.depth = static_cast<uint8_t>(bottom);
    w.ws = 0;
    for (uint32_t i = 0; i < w.n; ++i) {
      std::memcpy(&w.f[i], &in[1 + bottom + i], sizeof(Frame));
      const FrameKind k = w.f[i].kind;
      w.depth += IsContainer(k);
      if (CountsWhitespace(k)) {
        w.ws = w.f[i].aux;  // the top's is kept
        w.f[i].aux = 0;
      }
    }
    if (!CountsWhitespace(w.f[w.n - 1].kind)) w.ws = 0;
  };
  Emitter direct;  // its vectors stay empty: no allocation, no thread-local lookup
  direct.direct = &out;
  direct.chain_in = &in;
  Work w;
  load(w);
  stepper.StepThread(w, b, direct);
  if (direct.emitted == 1) return true;
  if (direct.emitted == 0) {
    out.clear();
    return false;
  }
  Scratch& sc = ThreadScratch();
  sc.em.Clear();  // forked: the readings through the graph
  load(w);
  stepper.StepThread(w, b, sc.em);
  Build(Graph(in), sc, out);
  return !out.empty();
}

}  // namespace

SchemaState StartState(const CompiledSchema& schema, uint32_t node) {
  SchemaState s(2);
  s[0].node = 1;  // one level
  s[0].phase = kChainLayout;
  s[1] = MakeFrame(FrameKind::kPending, node == kNone ? schema.root : node);
  return s;
}

bool Step(const CompiledSchema& schema, const SchemaState& in, uint8_t b, SchemaState& out) {
  const Stepper stepper(schema);
  if (in.empty()) {
    out.clear();
    return false;
  }
  if (IsChain(in)) return StepChain(stepper, in, b, out);
  Scratch& sc = ThreadScratch();
  const Graph g(in);
  sc.em.Clear();
  MarkTops(g, sc.under);
  Work w;
  // Every reading under one top frame, alone on the highest level (inside a string, key or
  // number of a union): when the byte only changes that frame the graph below stays as it is.
  if (const uint32_t top = g.levels() - 1; top >= 1 && g.count(top) == 1) {
    bool one_top = true;
    for (uint32_t j = 0; j < top && one_top; ++j) {
      for (uint32_t k = 0; k < g.count(j) && one_top; ++k) one_top = sc.under.test(j, k);
    }
    if (one_top && g.frame(top, 0).kind != FrameKind::kKey) {
      const uint32_t ks[1] = {0};
      LoadWindow(g, top, 0, ks, 1, w);
      stepper.narrow_ = false;
      stepper.StepThread(w, b, sc.em);
      if (!stepper.narrow_ && sc.em.readings.empty()) {
        out.clear();
        return false;
      }
      if (!stepper.narrow_ && sc.em.readings.size() == 1 && sc.em.readings[0].n == 1 &&
          sc.em.readings[0].bottom == top && !sc.em.readings[0].done) {
        out.assign(in.begin(), in.end());
        out[g.EntryAt(top, 0)] = sc.em.frames[sc.em.readings[0].first];
        return true;
      }
      sc.em.Clear();
    }
  }
  for (uint32_t j = 0; j < g.levels(); ++j) {
    for (uint32_t k = 0; k < g.count(j); ++k) {
      if (sc.under.test(j, k)) continue;
      if (j >= 1 && g.frame(j, k).kind != FrameKind::kKey) {  // a key reads its object
        // Most bytes touch only the top frame: step it alone, its parents shared, and widen
        // the window over each parent and grandparent only when the byte reaches below it.
        const size_t readings = sc.em.readings.size(), frames = sc.em.frames.size();
        const uint32_t ks[1] = {k};
        LoadWindow(g, j, static_cast<int32_t>(k), ks, 1, w);
        stepper.narrow_ = false;
        stepper.StepThread(w, b, sc.em);
        if (!stepper.narrow_) continue;
        sc.em.readings.resize(readings);
        sc.em.frames.resize(frames);
      }
      if (j == 0) {
        const uint32_t ks[1] = {k};
        LoadWindow(g, 0, -1, ks, 1, w);
        stepper.StepThread(w, b, sc.em);
        continue;
      }
      g.ForEachParent(j, k, [&](uint32_t p) {
        if (j == 1) {
          const uint32_t ks[2] = {p, k};
          LoadWindow(g, 0, -1, ks, 2, w);
          stepper.StepThread(w, b, sc.em);
          return;
        }
        g.ForEachParent(j - 1, p, [&](uint32_t gp) {
          const uint32_t ks[3] = {gp, p, k};
          LoadWindow(g, j - 2, static_cast<int32_t>(gp), ks, 3, w);
          stepper.StepThread(w, b, sc.em);
        });
      });
    }
  }
  Build(g, sc, out);
  return !out.empty();
}

bool CanEnd(const CompiledSchema& schema, const SchemaState& state) {
  const Stepper stepper(schema);
  const Graph g(state);
  if (g.done()) return true;
  if (g.levels() == 0) return false;
  // A complete top-level scalar is alone on its reading's stack: an entry of level 0 (scalars
  // are always tops).
  for (uint32_t k = 0; k < g.count(0); ++k) {
    if (stepper.ValueCanEnd(g.frame(0, k))) return true;
  }
  return false;
}

uint64_t Readings(const SchemaState& state) {
  const Graph g(state);
  LevelBits under;
  MarkTops(g, under);
  std::vector<std::vector<uint64_t>> paths(g.levels());
  uint64_t total = g.done() ? 1 : 0;
  auto add = [](uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; };
  for (uint32_t j = 0; j < g.levels(); ++j) {
    paths[j].assign(g.count(j), 0);
    for (uint32_t k = 0; k < g.count(j); ++k) {
      if (j == 0) {
        paths[j][k] = 1;
      } else {
        g.ForEachParent(j, k, [&](uint32_t p) { paths[j][k] = add(paths[j][k], paths[j - 1][p]); });
      }
      if (!under.test(j, k)) total = add(total, paths[j][k]);
    }
  }
  return total;
}

}  // namespace mlaserve::model::schema_internal
