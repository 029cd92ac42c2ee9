// Passes over a compiled schema's node graph (schema_recognizer.h) once every node is built:
// what the recognizer needs to know about a node beyond its own keywords. Internal to
// model/constraint.
#pragma once

#include "model/constraint/schema_recognizer.h"

namespace mlaserve::model::schema_internal {

// Node::leaves: the non-union nodes each node's value may start as (alternatives in order,
// each once; unions through $ref cycles contribute nothing twice).
void ComputeLeaves(CompiledSchema& schema);

// Node::min_depth: the containers each node's shortest value nests, kUnsatisfiable when none
// fits within the nesting limit (json_recognizer.h's kMaxDepth). A fixed point, so recursion
// through required properties / items converges.
void ComputeMinDepth(CompiledSchema& schema);

}  // namespace mlaserve::model::schema_internal
