// Schemas of the union tests (json_schema_union_test.cc, json_schema_vocab_test.cc's
// UnionMaskTimings): unions whose alternatives agree over a long stretch.
#pragma once

#include <string>

#include "absl/strings/str_cat.h"

namespace mlaserve::model::testing {

// What Pydantic 2 emits for a tree of plain unions whose models share their first fields
// (class Base: id, children: list[Section | Paragraph | Figure]; each subclass adds one field).
// Inside a node's children every ancestor's three readings are alive: 3^depth of them.
inline constexpr char kDocumentTree[] =
    R"({"$defs": {"Figure": {"properties": {"id": {"title": "Id", "type": "string"}, )"
    R"("children": {"default": [], "items": {"anyOf": [{"$ref": "#/$defs/Section"}, )"
    R"({"$ref": "#/$defs/Paragraph"}, {"$ref": "#/$defs/Figure"}]}, "title": "Children", )"
    R"("type": "array"}, "caption": {"title": "Caption", "type": "string"}}, "required": ["id", )"
    R"("caption"], "title": "Figure", "type": "object"}, )"
    R"("Paragraph": {"properties": {"id": {"title": "Id", "type": "string"}, )"
    R"("children": {"default": [], "items": {"anyOf": [{"$ref": "#/$defs/Section"}, )"
    R"({"$ref": "#/$defs/Paragraph"}, {"$ref": "#/$defs/Figure"}]}, "title": "Children", )"
    R"("type": "array"}, "text": {"title": "Text", "type": "string"}}, "required": ["id", )"
    R"("text"], "title": "Paragraph", "type": "object"}, )"
    R"("Section": {"properties": {"id": {"title": "Id", "type": "string"}, )"
    R"("children": {"default": [], "items": {"anyOf": [{"$ref": "#/$defs/Section"}, )"
    R"({"$ref": "#/$defs/Paragraph"}, {"$ref": "#/$defs/Figure"}]}, "title": "Children", )"
    R"("type": "array"}, "title": {"title": "Title", "type": "string"}}, "required": ["id", )"
    R"("title"], "title": "Section", "type": "object"}}, )"
    R"("properties": {"root": {"anyOf": [{"$ref": "#/$defs/Section"}, )"
    R"({"$ref": "#/$defs/Paragraph"}, {"$ref": "#/$defs/Figure"}], "title": "Root"}}, )"
    R"("required": ["root"], "title": "Doc", "type": "object"})";

inline constexpr const char* kKinds[] = {"title", "text", "caption"};  // Section, Paragraph, Figure

// {"id": "nD", "children": [CHILD], "<kind>": "x"}, its child of kind depth % 3, as Pydantic's
// model_dump_json writes it.
inline std::string TreeNode(int kind, int depth) {
  std::string children;
  if (depth > 0) children = TreeNode(depth % 3, depth - 1);
  return absl::StrCat(R"({"id": "n)", depth, R"(", "children": [)", children, R"(], ")",
                      kKinds[kind], R"(": "x"})");
}
inline std::string Document(int root_kind, int depth) {
  return absl::StrCat(R"({"root": )", TreeNode(root_kind, depth), "}");
}

// anyOf over `n` objects sharing their first property (tool_choice "required" over n tools whose
// arguments start with "query"): {"query": string, "optI": integer}, both required, no others.
inline std::string WideUnion(int n) {
  std::string alternatives;
  for (int i = 0; i < n; ++i) {
    absl::StrAppend(&alternatives, i > 0 ? ", " : "",
                    R"({"type": "object", "properties": {"query": {"type": "string"}, "opt)", i,
                    R"(": {"type": "integer"}}, "required": ["query", "opt)", i,
                    R"("], "additionalProperties": false})");
  }
  return absl::StrCat(R"({"anyOf": [)", alternatives, "]}");
}

}  // namespace mlaserve::model::testing
