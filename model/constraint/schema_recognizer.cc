#include "model/constraint/schema_recognizer.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "model/constraint/json_recognizer.h"

namespace mlaserve::model::schema_internal {
namespace {

using json_internal::IsDigit;
using json_internal::IsHex;
using json_internal::IsWhitespace;
using json_internal::kMaxDepth;
using json_internal::kMaxWhitespaceRun;

// Levels of a state: containers, plus the pending value / key / scalar on top.
constexpr int kMaxLevels = kMaxDepth + 2;

// The state header's phase: its levels hold one frame each, written without level headers.
constexpr uint8_t kChainLayout = 1;
bool IsChain(const SchemaState& s) { return s[0].phase == kChainLayout; }

// A window's frames: at most the three a byte can touch (a scalar ending, its container closing,
// the container's parent moving past it), plus what the byte pushes.
constexpr int kWindowFrames = 8;

bool CountsWhitespace(FrameKind k) {
  return k == FrameKind::kPending || k == FrameKind::kObject || k == FrameKind::kArray;
}
bool IsContainer(FrameKind k) { return k == FrameKind::kObject || k == FrameKind::kArray; }

// One reading being stepped, seen through a window: its top frames f[0, n), f[0] at level
// `bottom` of the state's graph; below f[0] the reading goes on through the parents of input
// entry `base` (at level `bottom`; -1 when bottom is 0). A byte pops at most two frames and
// changes the one below them, so a window of the top three frames is never left; Step first
// tries the top frame alone (Stepper::narrow_ says when the byte reached below it).
struct Work {
  uint8_t ws = 0;      // whitespace run so far
  bool done = false;   // the top-level value is complete
  uint8_t depth = 0;   // open containers (the levels below the window are all containers)
  uint8_t bottom = 0;
  int32_t base = -1;
  uint16_t n = 0;
  union {  // not initialized: only the first n frames are ever read
    Frame f[kWindowFrames];
  };

  Work() {}
  Frame& top() { return f[n - 1]; }
  void CopyFrom(const Work& o) {
    ws = o.ws;
    done = o.done;
    depth = o.depth;
    bottom = o.bottom;
    base = o.base;
    n = o.n;
    std::memcpy(f, o.f, n * sizeof(Frame));
  }
  void Push(const Frame& frame) { f[n++] = frame; }
};

// The readings one Step produces, as windows over the input state (Step builds the graph).
struct Emitted {
  uint8_t bottom;
  int32_t base;
  uint32_t first;  // frames in Emitter::frames
  uint16_t n;
  bool done;
};
struct Emitter {
  std::vector<Emitted> readings;
  std::vector<Frame> frames;
  // Direct mode (a state of one reading, StepChain): the first reading is written straight to
  // `*direct` as a chain over `chain_in`'s levels below the window; `emitted` counts them, and
  // past one StepChain steps again through the graph.
  SchemaState* direct = nullptr;
  const SchemaState* chain_in = nullptr;
  uint32_t emitted = 0;
  void Clear() {
    readings.clear();
    frames.clear();
    direct = nullptr;
    emitted = 0;
  }
};

void EmitChain(const Work& w, Emitter& out) {
  if (out.emitted++ > 0) return;  // forked: StepChain steps the window again through the graph
  SchemaState& s = *out.direct;
  const uint32_t levels = w.n == 0 ? 0 : w.bottom + w.n;
  s.resize(1 + static_cast<size_t>(levels));
  s[0] = Frame();
  s[0].phase = kChainLayout;
  s[0].flags = w.done ? 1 : 0;
  s[0].node = static_cast<uint16_t>(levels);
  if (levels == 0) return;
  if (w.bottom > 0) std::memcpy(s.data() + 1, out.chain_in->data() + 1, w.bottom * sizeof(Frame));
  Frame* o = s.data() + 1 + w.bottom;
  std::memcpy(o, w.f, w.n * sizeof(Frame));
  for (uint16_t i = 0; i < w.n; ++i) {
    if (CountsWhitespace(o[i].kind)) o[i].aux = i + 1 == w.n ? w.ws : 0;
  }
}

// The whitespace run lives in the top frame's `aux` (unused by the kinds that count it), so
// that readings equal but for it stay distinct; frames below the top hold 0 there.
void Emit(const Work& w, Emitter& out) {
  if (out.direct != nullptr) return EmitChain(w, out);
  out.readings.push_back({w.bottom, w.base, static_cast<uint32_t>(out.frames.size()), w.n, w.done});
  for (uint16_t i = 0; i < w.n; ++i) {
    Frame f = w.f[i];
    if (CountsWhitespace(f.kind)) f.aux = i + 1 == w.n ? w.ws : 0;
    out.frames.push_back(f);
  }
}

Frame MakeFrame(FrameKind kind, uint32_t node, uint8_t phase = 0, uint64_t value = 0) {
  Frame f;
  f.kind = kind;
  f.node = static_cast<uint16_t>(node);
  f.phase = phase;
  f.value = value;
  return f;
}

class Stepper {
 public:
  explicit Stepper(const CompiledSchema& s) : s_(s) {}

  void StepThread(Work& w, uint8_t b, Emitter& out) const;
  // `f`, a top-level value on its own, may be the whole text.
  bool ValueCanEnd(const Frame& f) const;

 private:
  const Node& node(uint32_t id) const { return s_.nodes[id]; }
  bool Fits(const Work& w, uint32_t id) const {
    const uint32_t d = node(id).min_depth;
    return d != kUnsatisfiable && w.depth + d <= static_cast<uint32_t>(kMaxDepth);
  }

  // Pending -> the leaf values `b` starts.
  void StartValue(Work& w, uint8_t b, Emitter& out) const;
  bool StartLeaf(Work& w, uint32_t leaf, uint8_t b) const;
  // A value on top was popped: its container moves past it (or the text is complete).
  void FinishValue(Work& w) const;
  void CloseContainer(Work& w) const {
    --w.n;
    --w.depth;
    FinishValue(w);
  }
  // Ends the lazily ended scalar on top and feeds `b` to what follows it.
  void EndScalarThenStep(const Work& w, uint8_t b, Emitter& out) const {
    Work rest;
    rest.CopyFrom(w);
    --rest.n;
    FinishValue(rest);
    StepThread(rest, b, out);
  }

  void ObjectByte(Work& w, uint8_t b, Emitter& out) const;
  void ArrayByte(Work& w, uint8_t b, Emitter& out) const;
  void KeyByte(Work& w, uint8_t b, Emitter& out) const;
  bool StringByte(Work& w, uint8_t b) const;
  void NumberByte(Work& w, uint8_t b, Emitter& out) const;
  void DfaNumberByte(Work& w, uint8_t b, Emitter& out) const;
  void IntegerByte(Work& w, uint8_t b, Emitter& out) const;
  void LiteralByte(Work& w, uint8_t b, Emitter& out) const;

  // Objects: entry `e` may be written next when at or after `next` with no required entry
  // skipped, and its value fits; other keys when no required entry is left.
  bool EntryOk(const Work& w, const Node& o, uint64_t next, uint32_t e) const {
    return e >= next && e <= o.first_required[next] && e < o.entries.size() &&
           Fits(w, o.entries[e].value);
  }
  bool OtherOk(const Work& w, const Node& o, uint64_t next) const {
    return o.additional != kNone && o.first_required[next] == o.entries.size() &&
           Fits(w, o.additional);
  }
  bool KeyLive(const Work& w, const Node& o, uint64_t next, uint16_t state) const {
    const KeyMatcher& km = s_.key_matchers[o.key_matcher];
    const uint32_t* begin = km.below.data() + km.below_begin[state];
    const uint32_t* end = km.below.data() + km.below_begin[state + 1];
    for (const uint32_t* e = std::lower_bound(begin, end, static_cast<uint32_t>(next));
         e != end && *e <= o.first_required[next]; ++e) {
      if (Fits(w, o.entries[*e].value)) return true;
    }
    return km.other_live[state] && OtherOk(w, o, next);
  }

  // Arrays: the node of item `count`, or kNone when no further item may be written.
  uint32_t ItemNode(const Work& w, const Node& a, uint64_t count) const {
    if (a.max_items != kUnbounded && count >= a.max_items) return kNone;
    const uint32_t item = count < a.prefix.size() ? a.prefix[count] : a.items;
    return item != kNone && Fits(w, item) ? item : kNone;
  }

  // Bounded or multipleOf integers track their magnitude.
  static bool Tracked(const Node& n) { return n.has_lo || n.has_hi || n.multiple > 1; }
  bool IntegerLive(const Node& n, uint8_t flags, uint64_t magnitude) const;
  bool IntegerCanEnd(const Node& n, uint8_t flags, uint64_t magnitude) const;

  const CompiledSchema& s_;
 public:
  // Set when a byte reached below the window (Step then widens it); the reading was not emitted.
  mutable bool narrow_ = false;
};

void Stepper::FinishValue(Work& w) const {
  if (w.n == 0) {
    if (w.bottom == 0) {
      w.done = true;
    } else {
      narrow_ = true;  // the container is below the window: step again with a wider one
    }
    return;
  }
  Frame& parent = w.top();
  const Node& p = node(parent.node);
  if (parent.kind == FrameKind::kObject) {
    parent.phase = kObjAfter;
    parent.value = parent.value < p.entries.size() ? parent.value + 1 : p.entries.size();
  } else {
    parent.phase = kArrAfter;
    parent.value = std::min(parent.value + 1, p.count_cap);
  }
}

void Stepper::StepThread(Work& w, uint8_t b, Emitter& out) const {
  if (w.done || w.n == 0) return;  // nothing may follow the complete value (or narrow_)
  Frame& top = w.top();
  switch (top.kind) {
    case FrameKind::kPending:
    case FrameKind::kObject:
    case FrameKind::kArray:
      if (IsWhitespace(b)) {
        if (w.ws < kMaxWhitespaceRun) {
          ++w.ws;
          Emit(w, out);
        }
        return;
      }
      w.ws = 0;
      break;
    default:
      break;
  }
  switch (top.kind) {
    case FrameKind::kThread:
    case FrameKind::kParents:
      return;
    case FrameKind::kPending: return StartValue(w, b, out);
    case FrameKind::kObject: return ObjectByte(w, b, out);
    case FrameKind::kArray: return ArrayByte(w, b, out);
    case FrameKind::kKey: return KeyByte(w, b, out);
    case FrameKind::kString:
      if (StringByte(w, b)) Emit(w, out);
      return;
    case FrameKind::kDfaString: {
      const Dfa& dfa = s_.dfas[node(top.node).dfa];
      const uint16_t state = static_cast<uint16_t>(top.value);
      const uint16_t next = dfa.Next(state, b);
      if (next != Dfa::kDead) {
        top.value = next;
      } else if (b == '"' && dfa.Accepting(state)) {
        --w.n;
        FinishValue(w);
      } else {
        return;
      }
      Emit(w, out);
      return;
    }
    case FrameKind::kNumber: return NumberByte(w, b, out);
    case FrameKind::kDfaNumber: return DfaNumberByte(w, b, out);
    case FrameKind::kInteger: return IntegerByte(w, b, out);
    case FrameKind::kLiteral: return LiteralByte(w, b, out);
  }
}

void Stepper::StartValue(Work& w, uint8_t b, Emitter& out) const {
  const Node& pending = node(w.top().node);
  --w.n;
  for (uint32_t leaf : pending.leaves) {
    if (!Fits(w, leaf)) continue;
    Work v;
    v.CopyFrom(w);
    if (StartLeaf(v, leaf, b)) Emit(v, out);
  }
}

bool Stepper::StartLeaf(Work& w, uint32_t leaf, uint8_t b) const {
  const Node& n = node(leaf);
  switch (n.kind) {
    case NodeKind::kAnyOf:
      return false;  // leaves are never unions
    case NodeKind::kObject:
      if (b != '{') return false;
      w.Push(MakeFrame(FrameKind::kObject, leaf, kObjOpen));
      ++w.depth;
      return true;
    case NodeKind::kArray:
      if (b != '[') return false;
      w.Push(MakeFrame(FrameKind::kArray, leaf, kArrOpen));
      ++w.depth;
      return true;
    case NodeKind::kString:
      if (b != '"') return false;
      w.Push(MakeFrame(n.dfa != kNone ? FrameKind::kDfaString : FrameKind::kString, leaf));
      return true;
    case NodeKind::kNumber:
      if (n.dfa != kNone) {
        const uint16_t next = s_.dfas[n.dfa].Next(0, b);
        if (next == Dfa::kDead) return false;
        w.Push(MakeFrame(FrameKind::kDfaNumber, leaf, 0, next));
        return true;
      }
      if (b == '-') w.Push(MakeFrame(FrameKind::kNumber, leaf, kNumMinus));
      else if (b == '0') w.Push(MakeFrame(FrameKind::kNumber, leaf, kNumZero));
      else if (b >= '1' && b <= '9') w.Push(MakeFrame(FrameKind::kNumber, leaf, kNumInt));
      else return false;
      return true;
    case NodeKind::kInteger: {
      Frame f = MakeFrame(FrameKind::kInteger, leaf);
      const bool bounded = Tracked(n);
      if (b == '-') {
        f.flags = kIntNegative;
      } else if (IsDigit(b)) {
        f.flags = kIntDigit | (b == '0' ? kIntZero : 0);
        f.value = bounded ? b - '0' : 0;
      } else {
        return false;
      }
      if (bounded && !IntegerLive(n, f.flags, f.value)) return false;
      w.Push(f);
      return true;
    }
    case NodeKind::kLiteral: {
      w.Push(MakeFrame(FrameKind::kLiteral, leaf));
      const std::vector<std::string>& lits = n.literals;
      const auto it = std::lower_bound(lits.begin(), lits.end(), std::string_view(
          reinterpret_cast<const char*>(&b), 1), [](const std::string& s, std::string_view key) {
            return std::string_view(s).substr(0, 1) < key;
          });
      if (it == lits.end() || static_cast<uint8_t>((*it)[0]) != b) return false;
      const uint64_t index = it - lits.begin();
      w.top().value = index << 32 | 1;
      if (it->size() == 1 && !(index + 1 < lits.size() && lits[index + 1].starts_with(*it))) {
        --w.n;
        FinishValue(w);
      }
      return true;
    }
  }
  return false;
}

void Stepper::ObjectByte(Work& w, uint8_t b, Emitter& out) const {
  Frame& top = w.top();
  const Node& o = node(top.node);
  const uint64_t next = top.value;
  const size_t n = o.entries.size();
  switch (top.phase) {
    case kObjOpen:
      if (b == '}') {
        if (o.first_required[0] != n) return;
        CloseContainer(w);
        return Emit(w, out);
      }
      [[fallthrough]];
    case kObjKey:
      if (b != '"' || !KeyLive(w, o, next, 0)) return;
      top.phase = kObjKey;
      w.Push(MakeFrame(FrameKind::kKey, top.node));
      return Emit(w, out);
    case kObjColon:
      if (b != ':') return;
      top.phase = kObjValue;
      w.Push(MakeFrame(FrameKind::kPending, next < n ? o.entries[next].value : o.additional));
      return Emit(w, out);
    case kObjAfter:
      if (b == ',') {
        if (!KeyLive(w, o, next, 0)) return;
        top.phase = kObjKey;
        return Emit(w, out);
      }
      if (b == '}' && o.first_required[next] == n) {
        CloseContainer(w);
        return Emit(w, out);
      }
      return;
    default:
      return;
  }
}

void Stepper::KeyByte(Work& w, uint8_t b, Emitter& out) const {
  if (w.n < 2) {
    narrow_ = true;
    return;
  }
  Frame& key = w.top();
  Frame& object = w.f[w.n - 2];
  const Node& o = node(object.node);
  const KeyMatcher& km = s_.key_matchers[o.key_matcher];
  const uint16_t state = static_cast<uint16_t>(key.value);
  const uint16_t next_state = km.dfa.Next(state, b);
  if (next_state != Dfa::kDead) {
    // A raw '"' is never a transition (canonical content spells it \"), so this byte does not
    // end the key.
    if (!KeyLive(w, o, object.value, next_state)) return;
    key.value = next_state;
    return Emit(w, out);
  }
  if (b != '"') return;
  const int32_t entry = km.entry_at[state];
  if (entry >= 0 && EntryOk(w, o, object.value, entry)) {
    object.value = entry;
  } else if (km.other_accept[state] && OtherOk(w, o, object.value)) {
    object.value = o.entries.size();
  } else {
    return;
  }
  --w.n;
  object.phase = kObjColon;
  Emit(w, out);
}

void Stepper::ArrayByte(Work& w, uint8_t b, Emitter& out) const {
  Frame& top = w.top();
  const Node& a = node(top.node);
  switch (top.phase) {
    case kArrOpen:
      if (b == ']') {
        if (a.min_items > 0) return;
        CloseContainer(w);
        return Emit(w, out);
      }
      [[fallthrough]];
    case kArrNext: {
      const uint32_t item = ItemNode(w, a, top.value);
      if (item == kNone) return;
      top.phase = kArrValue;
      w.Push(MakeFrame(FrameKind::kPending, item));
      return StartValue(w, b, out);
    }
    case kArrAfter:
      if (b == ',') {
        if (ItemNode(w, a, top.value) == kNone) return;
        top.phase = kArrNext;
        return Emit(w, out);
      }
      if (b == ']' && top.value >= a.min_items) {
        CloseContainer(w);
        return Emit(w, out);
      }
      return;
    default:
      return;
  }
}

// JSON string content (json_recognizer.h's rules); bounded strings count code points (an
// escape is one: surrogate escapes, which Python counts per pair, are refused in them).
bool Stepper::StringByte(Work& w, uint8_t b) const {
  Frame& f = w.top();
  const Node& n = node(f.node);
  const bool bounded = n.min_len > 0 || n.max_len != kUnbounded;
  auto count = [&]() {
    if (!bounded) return true;
    if (n.max_len != kUnbounded) {
      if (f.value >= n.max_len) return false;
      ++f.value;
    } else {
      f.value = std::min(f.value + 1, n.min_len);
    }
    return true;
  };
  switch (f.phase) {
    case kStrChars:
      if (f.aux > 0) {
        if (b < f.utf8_lo || b > f.utf8_hi) return false;
        const bool last = --f.aux == 0;
        f.utf8_lo = last ? 0 : 0x80;
        f.utf8_hi = last ? 0 : 0xBF;
        return true;
      }
      if (b == '"') {
        if (f.value < n.min_len) return false;
        --w.n;
        FinishValue(w);
        return true;
      }
      if (b == '\\') {
        f.phase = kStrEscape;
        return count();
      }
      if (b < 0x20 || (b >= 0x80 && b < 0xC2) || b >= 0xF5) return false;
      if (b >= 0xC2) {
        if (b < 0xE0) {
          f.aux = 1, f.utf8_lo = 0x80, f.utf8_hi = 0xBF;
        } else if (b < 0xF0) {
          f.aux = 2, f.utf8_lo = b == 0xE0 ? 0xA0 : 0x80, f.utf8_hi = b == 0xED ? 0x9F : 0xBF;
        } else {
          f.aux = 3, f.utf8_lo = b == 0xF0 ? 0x90 : 0x80, f.utf8_hi = b == 0xF4 ? 0x8F : 0xBF;
        }
      }
      return count();
    case kStrEscape:
      if (b == 'u') {
        f.phase = kStrHex;
        f.aux = 4;
        return true;
      }
      f.phase = kStrChars;
      return b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' ||
             b == 'r' || b == 't';
    case kStrHex:
      if (!IsHex(b)) return false;
      if (bounded && f.aux == 4) f.flags = (b == 'd' || b == 'D') ? 1 : 0;
      if (bounded && f.aux == 3 && f.flags == 1 && !(b >= '0' && b <= '7')) return false;
      if (--f.aux == 0) {
        f.phase = kStrChars;
        f.flags = 0;
      }
      return true;
    default:
      return false;
  }
}

void Stepper::NumberByte(Work& w, uint8_t b, Emitter& out) const {
  Frame& f = w.top();
  const uint8_t phase = f.phase;
  int next = -1;
  switch (phase) {
    case kNumMinus: next = b == '0' ? kNumZero : IsDigit(b) ? kNumInt : -1; break;
    case kNumInt:
      if (IsDigit(b)) next = kNumInt;
      [[fallthrough]];
    case kNumZero:
      if (b == '.') next = kNumDot;
      else if (b == 'e' || b == 'E') next = kNumExpMark;
      break;
    case kNumDot: next = IsDigit(b) ? kNumFrac : -1; break;
    case kNumFrac:
      next = IsDigit(b) ? kNumFrac : (b == 'e' || b == 'E') ? kNumExpMark : -1;
      break;
    case kNumExpMark: next = (b == '+' || b == '-') ? kNumExpSign : IsDigit(b) ? kNumExpDigits : -1; break;
    case kNumExpSign: next = IsDigit(b) ? kNumExpDigits : -1; break;
    case kNumExpDigits: next = IsDigit(b) ? kNumExpDigits : -1; break;
  }
  const bool can_end = phase == kNumZero || phase == kNumInt || phase == kNumFrac ||
                       phase == kNumExpDigits;
  if (can_end) EndScalarThenStep(w, b, out);
  if (next >= 0) {
    f.phase = static_cast<uint8_t>(next);
    Emit(w, out);
  }
}

bool Stepper::IntegerLive(const Node& n, uint8_t flags, uint64_t magnitude) const {
  const bool negative = flags & kIntNegative;
  // The magnitudes the digits so far can still become: [lo_m, hi_m] ranges, or all >= 0; some
  // value of them must lie in the bounds (and be a multiple).
  auto signed_range_meets = [&](__int128 lo_m, __int128 hi_m) {
    __int128 a = negative ? -hi_m : lo_m, b = negative ? -lo_m : hi_m;
    if (n.has_lo) a = std::max<__int128>(a, n.lo);
    if (n.has_hi) b = std::min<__int128>(b, n.hi);
    if (a > b) return false;
    if (n.multiple <= 1) return true;
    const __int128 m = n.multiple;
    const __int128 first = a >= 0 ? (a + m - 1) / m * m : -((-a) / m * m);  // ceil to a multiple
    return first <= b;
  };
  constexpr __int128 kHuge = static_cast<__int128>(1) << 100;
  if (!(flags & kIntDigit)) return signed_range_meets(0, kHuge);
  if (flags & kIntZero) return signed_range_meets(0, 0);
  // Past 10^18 only an unbounded side is left, and appending digits reaches every residue.
  if (flags & kIntBig) return negative ? !n.has_lo : !n.has_hi;
  __int128 lo_m = magnitude, span = 1;
  for (int extra = 0; extra <= 20; ++extra) {
    if (signed_range_meets(lo_m, lo_m + span - 1)) return true;
    lo_m *= 10;
    span *= 10;
  }
  return false;
}

bool Stepper::IntegerCanEnd(const Node& n, uint8_t flags, uint64_t magnitude) const {
  if (!(flags & kIntDigit)) return false;
  if (!Tracked(n)) return true;
  const bool multiple_ok = n.multiple <= 1 || magnitude % n.multiple == 0;
  if (flags & kIntBig) return multiple_ok && ((flags & kIntNegative) ? !n.has_lo : !n.has_hi);
  const __int128 v = (flags & kIntNegative) ? -static_cast<__int128>(magnitude) : magnitude;
  return multiple_ok && (!n.has_lo || v >= n.lo) && (!n.has_hi || v <= n.hi);
}

void Stepper::IntegerByte(Work& w, uint8_t b, Emitter& out) const {
  Frame& f = w.top();
  const Node& n = node(f.node);
  if (IntegerCanEnd(n, f.flags, f.value)) EndScalarThenStep(w, b, out);
  if (!IsDigit(b) || (f.flags & kIntZero)) return;
  const bool bounded = Tracked(n);
  if (!(f.flags & kIntDigit)) {
    f.flags |= kIntDigit | (b == '0' ? kIntZero : 0);
  }
  if (bounded && (f.flags & kIntBig)) {
    // The magnitude modulo the multiple (0 without one).
    f.value = n.multiple > 1 ? static_cast<uint64_t>(
        (static_cast<unsigned __int128>(f.value) * 10 + (b - '0')) % n.multiple) : 0;
  } else if (bounded) {
    constexpr uint64_t kBig = 1'000'000'000'000'000'000ull;  // past every int64 bound / 9
    f.value = f.value * 10 + (b - '0');
    if (f.value >= kBig) {
      f.flags |= kIntBig;
      f.value = n.multiple > 1 ? f.value % n.multiple : 0;
    }
  }
  if (bounded && !IntegerLive(n, f.flags, f.value)) return;
  Emit(w, out);
}

// A bounded number: an automaton over its bytes (schema_number.h), ended lazily like kNumber.
void Stepper::DfaNumberByte(Work& w, uint8_t b, Emitter& out) const {
  Frame& f = w.top();
  const Dfa& dfa = s_.dfas[node(f.node).dfa];
  const uint16_t state = static_cast<uint16_t>(f.value);
  if (dfa.Accepting(state)) EndScalarThenStep(w, b, out);
  const uint16_t next = dfa.Next(state, b);
  if (next == Dfa::kDead) return;
  f.value = next;
  Emit(w, out);
}

void Stepper::LiteralByte(Work& w, uint8_t b, Emitter& out) const {
  Frame& f = w.top();
  const std::vector<std::string>& lits = node(f.node).literals;
  const uint64_t index = f.value >> 32;
  const size_t length = f.value & 0xFFFFFFFF;
  const std::string& first = lits[index];
  if (first.size() == length) EndScalarThenStep(w, b, out);
  thread_local std::string key;
  key.assign(first, 0, length);
  key.push_back(static_cast<char>(b));
  const auto it = std::lower_bound(lits.begin() + index, lits.end(), key,
                                   [&](const std::string& s, const std::string& k) {
                                     return std::string_view(s).substr(0, k.size()) < k;
                                   });
  if (it == lits.end() || !it->starts_with(key)) return;
  const uint64_t next = it - lits.begin();
  f.value = next << 32 | (length + 1);
  if (it->size() == length + 1 && !(next + 1 < lits.size() && lits[next + 1].starts_with(*it))) {
    --w.n;
    FinishValue(w);
  }
  Emit(w, out);
}

bool Stepper::ValueCanEnd(const Frame& f) const {
  switch (f.kind) {
    case FrameKind::kNumber:
      return f.phase == kNumZero || f.phase == kNumInt || f.phase == kNumFrac ||
             f.phase == kNumExpDigits;
    case FrameKind::kInteger: return IntegerCanEnd(node(f.node), f.flags, f.value);
    case FrameKind::kDfaNumber:
      return s_.dfas[node(f.node).dfa].Accepting(static_cast<uint16_t>(f.value));
    case FrameKind::kLiteral: {
      const std::vector<std::string>& lits = node(f.node).literals;
      return lits[f.value >> 32].size() == (f.value & 0xFFFFFFFF);
    }
    default:
      return false;
  }
}

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
  void set(uint32_t j, uint32_t k) { bits[at[j] + k / 64] |= uint64_t{1} << (k % 64); }
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
