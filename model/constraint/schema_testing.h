// Helpers of the structured-output tests: reading a text through a compiled schema's recognizer.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "gtest/gtest.h"
#include "model/constraint/json_schema.h"
#include "model/constraint/schema_recognizer.h"

namespace mlaserve::model::testing {

inline std::shared_ptr<const JsonSchema> MustCompile(std::string_view schema, bool strict = false) {
  auto compiled = JsonSchema::Compile(schema, strict);
  EXPECT_TRUE(compiled.ok()) << schema << ": " << compiled.status();
  return compiled.ok() ? *compiled : nullptr;
}

// How far the recognizer reads `text`: bytes taken before the first refused one, and whether
// the text read so far is a complete value (EOS allowed).
struct Reading {
  size_t taken = 0;
  bool complete = false;
};

inline Reading Read(const JsonSchema& schema, std::string_view text) {
  using namespace schema_internal;
  SchemaState state = StartState(schema.compiled()), next;
  Reading r;
  for (; r.taken < text.size(); ++r.taken) {
    if (!Step(schema.compiled(), state, static_cast<uint8_t>(text[r.taken]), next)) break;
    state.swap(next);
  }
  r.complete = CanEnd(schema.compiled(), state);
  return r;
}

// The whole text is taken and complete.
inline bool Accepts(const JsonSchema& schema, std::string_view text) {
  const Reading r = Read(schema, text);
  return r.taken == text.size() && r.complete;
}

}  // namespace mlaserve::model::testing
