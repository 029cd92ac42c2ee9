// Stepping one reading of a schema's text by one byte (schema_recognizer.h): the byte rules of
// every value kind (objects, arrays, keys, strings, numbers, integers, literals), applied to a
// window of the reading's top frames. Internal to model/constraint: the recognizer keeps the
// readings' graph, hands each reading's window to a Stepper and builds the next state from the
// readings it emits.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "model/constraint/schema_recognizer.h"

namespace mlaserve::model::schema_internal {

// The state header's phase for the chain layout (schema_recognizer.h): one frame per level,
// without level headers.
inline constexpr uint8_t kChainLayout = 1;

// A window's frames: at most the three a byte can touch (a scalar ending, its container closing,
// the container's parent moving past it), plus what the byte pushes.
inline constexpr int kWindowFrames = 8;

inline bool CountsWhitespace(FrameKind k) {
  return k == FrameKind::kPending || k == FrameKind::kObject || k == FrameKind::kArray;
}
inline bool IsContainer(FrameKind k) { return k == FrameKind::kObject || k == FrameKind::kArray; }

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

// Records the reading in `w` (Stepper calls it for each reading a byte leaves). The whitespace
// run lives in the top frame's `aux` (unused by the kinds that count it), so that readings equal
// but for it stay distinct; frames below the top hold 0 there.
void Emit(const Work& w, Emitter& out);

inline Frame MakeFrame(FrameKind kind, uint32_t node, uint8_t phase = 0, uint64_t value = 0) {
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

  // Feeds `b` to the reading in `w` (changed), emitting each reading it becomes to `out`.
  void StepThread(Work& w, uint8_t b, Emitter& out) const;
  // `f`, a top-level value on its own, may be the whole text.
  bool ValueCanEnd(const Frame& f) const;
  // Set when a byte reached below the window (Step then widens it); that reading was not
  // emitted.
  mutable bool narrow_ = false;

 private:
  const Node& node(uint32_t id) const { return s_.nodes[id]; }
  // Node `id`'s shortest value fits within the nesting limit at the window's depth.
  bool Fits(const Work& w, uint32_t id) const;

  // Pending -> the leaf values `b` starts.
  void StartValue(Work& w, uint8_t b, Emitter& out) const;
  bool StartLeaf(Work& w, uint32_t leaf, uint8_t b) const;
  // A value on top was popped: its container moves past it (or the text is complete).
  void FinishValue(Work& w) const;
  void CloseContainer(Work& w) const;
  // Ends the lazily ended scalar on top and feeds `b` to what follows it.
  void EndScalarThenStep(const Work& w, uint8_t b, Emitter& out) const;

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
  bool EntryOk(const Work& w, const Node& o, uint64_t next, uint32_t e) const;
  bool OtherOk(const Work& w, const Node& o, uint64_t next) const;
  // Some entry or other key the key matcher's `state` leads to may still be written.
  bool KeyLive(const Work& w, const Node& o, uint64_t next, uint16_t state) const;

  // Arrays: the node of item `count`, or kNone when no further item may be written.
  uint32_t ItemNode(const Work& w, const Node& a, uint64_t count) const;

  // Bounded or multipleOf integers track their magnitude.
  static bool Tracked(const Node& n) { return n.has_lo || n.has_hi || n.multiple > 1; }
  bool IntegerLive(const Node& n, uint8_t flags, uint64_t magnitude) const;
  bool IntegerCanEnd(const Node& n, uint8_t flags, uint64_t magnitude) const;

  const CompiledSchema& s_;
};

}  // namespace mlaserve::model::schema_internal
