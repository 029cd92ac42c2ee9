// Structured outputs (OpenAI's response_format {"type": "json_schema", "json_schema": {...}}):
// a JSON Schema compiled into a byte-level recognizer of the JSON texts it admits, which
// JsonConstraint (json_constraint.h) walks over the vocabulary's trie exactly as JSON mode
// walks its recognizer.
//
// The compiled form is a graph of nodes, one per schema location ($ref and recursion are edges
// back into it): objects with their properties in the schema's order, arrays with prefix items
// and item counts, strings (plain, length-bounded in code points, or an automaton for pattern /
// format, schema_dfa.h), numbers, integers (optionally bounded), literals (enum / const /
// boolean / null as canonical JSON texts) and unions (anyOf, oneOf, a list of types). The
// recognizer's state (schema_recognizer.h) holds every way the text can still be read (an anyOf
// whose alternatives agree so far keeps both alive) as a graph of deterministic stacks sharing
// their equal frames, so the tokens allowed are the union over every reading still alive, not
// the first alternative's, and nested unions do not multiply the state.
//
// What is accepted, refused and how the text is written (key order, whitespace, strict) is
// docs/api.md's "Structured outputs"; every keyword we do not enforce is refused with
// INVALID_ARGUMENT naming it and its JSON pointer. Compiling checks that the schema admits a
// value (a schema that admits none is refused), and every state the recognizer reaches can still
// be completed within the nesting limit, so masks are never empty.
//
// Compiled schemas are immutable and shared: Get() compiles a (text, strict) pair once per
// process and keeps the kSchemaCacheEntries most recently used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace mlaserve::model {

namespace schema_internal {
struct CompiledSchema;
}

// Bounds on what one schema may ask for; each is INVALID_ARGUMENT when exceeded.
inline constexpr size_t kMaxSchemaBytes = 64 * 1024;
inline constexpr size_t kMaxSchemaNodes = 4096;
inline constexpr size_t kMaxEnumValues = 1024;
// Automaton states of all string patterns / formats / property-name matchers of one schema.
inline constexpr size_t kMaxSchemaDfaStates = 16384;
inline constexpr size_t kSchemaCacheEntries = 64;

class JsonSchema {
 public:
  // Compiles `text` (a JSON Schema, UTF-8 JSON). `strict` (OpenAI's json_schema.strict): an
  // object without additionalProperties admits no other properties, an array with prefixItems
  // and no items no more items (xgrammar's strict mode); without it, JSON Schema's defaults
  // (any other property / item). INVALID_ARGUMENT naming the keyword and its JSON pointer.
  static absl::StatusOr<std::shared_ptr<const JsonSchema>> Compile(std::string_view text,
                                                                   bool strict);
  // Compile, through the process's cache (thread-safe). Errors are not cached.
  static absl::StatusOr<std::shared_ptr<const JsonSchema>> Get(std::string_view text, bool strict);

  ~JsonSchema();
  // Unique per compiled schema in this process (mask cache keys use it).
  uint64_t serial() const { return serial_; }
  size_t node_count() const;
  const schema_internal::CompiledSchema& compiled() const { return *compiled_; }

 private:
  JsonSchema(std::unique_ptr<schema_internal::CompiledSchema> compiled, uint64_t serial);
  std::unique_ptr<schema_internal::CompiledSchema> compiled_;
  uint64_t serial_;
};

// A command-line schema argument (mlaservectl generate / mlaserve-run --response-schema): JSON
// text when it starts (after whitespace) with '{', else the path of a file holding it.
// INVALID_ARGUMENT naming a file that cannot be read or is over kMaxSchemaBytes.
absl::StatusOr<std::string> SchemaFromFlag(const std::string& value);

}  // namespace mlaserve::model
