#include "model/constraint/schema_stepper.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>

#include "model/constraint/json_recognizer.h"

namespace mlaserve::model::schema_internal {
namespace {

using json_internal::IsDigit;
using json_internal::IsHex;
using json_internal::IsWhitespace;
using json_internal::kMaxDepth;
using json_internal::kMaxWhitespaceRun;

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

}  // namespace

void Emit(const Work& w, Emitter& out) {
  if (out.direct != nullptr) return EmitChain(w, out);
  out.readings.push_back({w.bottom, w.base, static_cast<uint32_t>(out.frames.size()), w.n, w.done});
  for (uint16_t i = 0; i < w.n; ++i) {
    Frame f = w.f[i];
    if (CountsWhitespace(f.kind)) f.aux = i + 1 == w.n ? w.ws : 0;
    out.frames.push_back(f);
  }
}

bool Stepper::Fits(const Work& w, uint32_t id) const {
  const uint32_t d = node(id).min_depth;
  return d != kUnsatisfiable && w.depth + d <= static_cast<uint32_t>(kMaxDepth);
}

void Stepper::CloseContainer(Work& w) const {
  --w.n;
  --w.depth;
  FinishValue(w);
}

void Stepper::EndScalarThenStep(const Work& w, uint8_t b, Emitter& out) const {
  Work rest;
  rest.CopyFrom(w);
  --rest.n;
  FinishValue(rest);
  StepThread(rest, b, out);
}

bool Stepper::EntryOk(const Work& w, const Node& o, uint64_t next, uint32_t e) const {
  return e >= next && e <= o.first_required[next] && e < o.entries.size() &&
         Fits(w, o.entries[e].value);
}

bool Stepper::OtherOk(const Work& w, const Node& o, uint64_t next) const {
  return o.additional != kNone && o.first_required[next] == o.entries.size() &&
         Fits(w, o.additional);
}

bool Stepper::KeyLive(const Work& w, const Node& o, uint64_t next, uint16_t state) const {
  const KeyMatcher& km = s_.key_matchers[o.key_matcher];
  // An object that admits no key at all ({"type": "object"} strict, "properties": {} with
  // "additionalProperties": false) has a matcher without states: only "}" may follow "{".
  if (state >= km.dfa.states()) return false;
  const uint32_t* begin = km.below.data() + km.below_begin[state];
  const uint32_t* end = km.below.data() + km.below_begin[state + 1];
  for (const uint32_t* e = std::lower_bound(begin, end, static_cast<uint32_t>(next));
       e != end && *e <= o.first_required[next]; ++e) {
    if (Fits(w, o.entries[*e].value)) return true;
  }
  return km.other_live[state] && OtherOk(w, o, next);
}

uint32_t Stepper::ItemNode(const Work& w, const Node& a, uint64_t count) const {
  if (a.max_items != kUnbounded && count >= a.max_items) return kNone;
  const uint32_t item = count < a.prefix.size() ? a.prefix[count] : a.items;
  return item != kNone && Fits(w, item) ? item : kNone;
}

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
  // Past every int64 bound only an unbounded side is left, and appending digits reaches every
  // residue.
  if (flags & kIntBig) return negative ? !n.has_lo : !n.has_hi;
  // Each appended digit multiplies the reachable magnitudes by 10; once they are past every
  // int64 bound the answer is the one above (stopping there also keeps lo_m * 10 in range).
  __int128 lo_m = magnitude, span = 1;
  while (lo_m < static_cast<__int128>(kIntPastBounds)) {
    if (signed_range_meets(lo_m, lo_m + span - 1)) return true;
    lo_m *= 10;
    span *= 10;
  }
  return negative ? !n.has_lo : !n.has_hi;
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
    // Exact below kIntPastBounds (f.value < 10^19, so this fits), which a 19-digit bound
    // such as INT64_MAX needs; only magnitudes past every bound become kIntBig.
    const unsigned __int128 next = static_cast<unsigned __int128>(f.value) * 10 + (b - '0');
    if (next >= kIntPastBounds) {
      f.flags |= kIntBig;
      f.value = n.multiple > 1 ? static_cast<uint64_t>(next % n.multiple) : 0;
    } else {
      f.value = static_cast<uint64_t>(next);
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

}  // namespace mlaserve::model::schema_internal
