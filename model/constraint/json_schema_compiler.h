// JSON Schema text -> CompiledSchema (schema_recognizer.h), the work behind
// JsonSchema::Compile (json_schema.h). Internal to model/constraint.
//
// Keywords are read per schema location; anything neither a constraint we enforce nor an
// annotation is refused with INVALID_ARGUMENT naming it and its JSON pointer. The number
// keywords are read by schema_number_keywords.h, object property names matched by
// schema_key_matcher.h, strings' patterns / formats by schema_dfa.h; once every node is built,
// schema_graph.h's passes fill in what the recognizer needs, and enum / const values beside
// other keywords are filtered through the recognizer itself.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "model/constraint/schema_recognizer.h"

namespace mlaserve::model::schema_internal {

// Parses and compiles `text` (JSON, any size: the caller bounds it). `strict` as
// JsonSchema::Compile's.
absl::StatusOr<CompiledSchema> CompileSchemaText(std::string_view text, bool strict);

}  // namespace mlaserve::model::schema_internal
