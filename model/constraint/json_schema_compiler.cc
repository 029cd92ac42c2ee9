// JSON Schema -> CompiledSchema (json_schema_compiler.h): the schema's locations become nodes.
// Anything not listed in kConstraintKeywords / kAnnotations is refused with its pointer.
#include "model/constraint/json_schema_compiler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <variant>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/constraint/json_recognizer.h"
#include "model/constraint/json_schema.h"
#include "model/constraint/schema_document.h"
#include "model/constraint/schema_graph.h"
#include "model/constraint/schema_key_matcher.h"
#include "model/constraint/schema_number_keywords.h"

namespace mlaserve::model::schema_internal {
namespace {

using json_internal::kMaxDepth;

// Ignored, as JSON Schema validators ignore them. `discriminator` is OpenAPI's (Pydantic emits it
// beside a tagged union's oneOf): each alternative's `const` on the tag already decides.
const std::set<std::string, std::less<>> kAnnotations = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment",
    "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "discriminator"};
const std::set<std::string, std::less<>> kConstraintKeywords = {
    "type", "properties", "required", "additionalProperties", "items", "prefixItems",
    "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "minLength",
    "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "pattern", "format", "uniqueItems"};
const std::set<std::string, std::less<>> kObjectKeywords = {"properties", "required",
                                                            "additionalProperties"};
const std::set<std::string, std::less<>> kArrayKeywords = {"items", "prefixItems", "minItems",
                                                           "maxItems"};
const std::set<std::string, std::less<>> kStringKeywords = {"minLength", "maxLength", "pattern",
                                                            "format"};
const std::set<std::string, std::less<>> kNumberKeywords = {
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"};

class Compiler {
 public:
  Compiler(const Json& doc, bool strict) : doc_(doc), strict_(strict) {}

  absl::StatusOr<CompiledSchema> Run();

 private:
  absl::Status Error(const std::string& pointer, absl::string_view what) const {
    return SchemaError(pointer, what);
  }
  absl::StatusOr<uint32_t> NewNode(const std::string& pointer, NodeKind kind) {
    if (out_.nodes.size() >= kMaxSchemaNodes) {
      return Error(pointer, absl::StrCat("the schema compiles to more than ", kMaxSchemaNodes,
                                         " nodes"));
    }
    out_.nodes.emplace_back();
    out_.nodes.back().kind = kind;
    return static_cast<uint32_t>(out_.nodes.size() - 1);
  }
  absl::StatusOr<uint32_t> AnyNode();
  absl::StatusOr<uint32_t> LiteralNode(const std::string& pointer, std::vector<std::string> lits,
                                       uint32_t depth);
  absl::StatusOr<uint32_t> At(const Json& schema, const std::string& pointer);
  absl::StatusOr<uint32_t> Body(const Json& schema, const std::string& pointer);
  absl::StatusOr<uint32_t> Typed(const Json& schema, const std::string& pointer,
                                 const std::string& type);
  absl::StatusOr<uint32_t> Object(const Json& schema, const std::string& pointer);
  absl::StatusOr<uint32_t> Array(const Json& schema, const std::string& pointer);
  absl::StatusOr<uint32_t> String(const Json& schema, const std::string& pointer);
  absl::StatusOr<uint32_t> Numeric(const absl::StatusOr<NumericValues>& values,
                                   const std::string& pointer);
  absl::StatusOr<uint32_t> Ref(const std::string& ref, const std::string& pointer);
  absl::StatusOr<std::vector<std::string>> Literals(const Json& schema, const std::string& pointer,
                                                    uint32_t& depth);
  absl::StatusOr<uint64_t> Count(const Json& schema, const std::string& pointer,
                                 const char* keyword, uint64_t fallback);
  absl::Status AddKeyMatcher(Node& object, const std::string& pointer);
  absl::Status AddDfa(Dfa dfa, const std::string& pointer, uint32_t& id);

  bool FilterLiterals();

  const Json& doc_;
  const bool strict_;
  CompiledSchema out_;
  std::map<std::string, uint32_t> at_pointer_;
  uint32_t any_ = kNone;
  std::map<std::string, uint32_t> leaf_by_key_;  // hash-consed scalar leaves, by parameters
  size_t dfa_states_ = 0;
  // enum / const beside other keywords: the literal node, and the node the values must match.
  std::vector<std::pair<uint32_t, uint32_t>> filters_;
};

absl::StatusOr<uint32_t> Compiler::AnyNode() {
  if (any_ != kNone) return any_;
  // any = object of anything | array of anything | string | number | true | false | null.
  auto any = NewNode("", NodeKind::kAnyOf);
  if (!any.ok()) return any.status();
  any_ = *any;
  auto object = NewNode("", NodeKind::kObject);
  auto array = NewNode("", NodeKind::kArray);
  auto string = NewNode("", NodeKind::kString);
  auto number = NewNode("", NodeKind::kNumber);
  if (!object.ok() || !array.ok() || !string.ok() || !number.ok()) return Error("", "too many nodes");
  auto literals = LiteralNode("", {"false", "null", "true"}, 0);
  if (!literals.ok()) return literals.status();
  out_.nodes[*object].additional = any_;
  out_.nodes[*object].first_required = {0};
  if (absl::Status s = AddKeyMatcher(out_.nodes[*object], ""); !s.ok()) return s;
  out_.nodes[*array].items = any_;
  out_.nodes[any_].alternatives = {*object, *array, *string, *number, *literals};
  return any_;
}

absl::StatusOr<uint32_t> Compiler::LiteralNode(const std::string& pointer,
                                               std::vector<std::string> lits, uint32_t depth) {
  std::sort(lits.begin(), lits.end());
  lits.erase(std::unique(lits.begin(), lits.end()), lits.end());
  auto id = NewNode(pointer, NodeKind::kLiteral);
  if (!id.ok()) return id.status();
  out_.nodes[*id].literals = std::move(lits);
  out_.nodes[*id].literal_depth = depth;
  return id;
}

absl::Status Compiler::AddDfa(Dfa dfa, const std::string& pointer, uint32_t& id) {
  dfa_states_ += dfa.states();
  if (dfa_states_ > kMaxSchemaDfaStates) {
    return Error(pointer, absl::StrCat("the schema's patterns, formats and property names need "
                                       "more than ", kMaxSchemaDfaStates, " automaton states"));
  }
  id = static_cast<uint32_t>(out_.dfas.size());
  out_.dfas.push_back(std::move(dfa));
  return absl::OkStatus();
}

// One node per schema location, so that $ref and recursion resolve to it.
absl::StatusOr<uint32_t> Compiler::At(const Json& schema, const std::string& pointer) {
  if (auto it = at_pointer_.find(pointer); it != at_pointer_.end()) return it->second;
  auto id = NewNode(pointer, NodeKind::kAnyOf);
  if (!id.ok()) return id.status();
  at_pointer_.emplace(pointer, *id);
  auto body = Body(schema, pointer);
  if (!body.ok()) return body.status();
  out_.nodes[*id].alternatives = {*body};
  return *id;
}

absl::StatusOr<uint32_t> Compiler::Ref(const std::string& ref, const std::string& pointer) {
  if (ref.empty() || ref[0] != '#') {
    return Error(pointer, absl::StrCat("$ref \"", ref, "\" is not supported: only references "
                                       "inside the schema (\"#\", \"#/$defs/...\") are"));
  }
  const std::string target = ref.substr(1);
  if (!target.empty() && target[0] != '/') {
    return Error(pointer, absl::StrCat("$ref \"", ref, "\": anchors are not supported"));
  }
  const Json* j = nullptr;
  try {
    j = &doc_.at(Json::json_pointer(target));
  } catch (const Json::exception&) {
    return Error(pointer, absl::StrCat("$ref \"", ref, "\" does not resolve in the schema"));
  }
  return At(*j, target);
}

absl::StatusOr<uint32_t> Compiler::Body(const Json& schema, const std::string& pointer) {
  if (schema.is_boolean()) {
    if (schema.get<bool>()) return AnyNode();
    return NewNode(pointer, NodeKind::kAnyOf);  // false: no alternative, no value
  }
  if (!schema.is_object()) return Error(pointer, "a schema must be an object or a boolean");
  std::vector<std::string> constraints;
  for (const auto& [key, value] : schema.items()) {
    if (kAnnotations.contains(key)) continue;
    if (!kConstraintKeywords.contains(key)) {
      return Error(pointer + "/" + EscapePointerToken(key),
                   absl::StrCat("keyword \"", key, "\" is not supported"));
    }
    constraints.push_back(key);
  }
  if (auto it = schema.find("uniqueItems"); it != schema.end()) {
    if (!it->is_boolean() || it->get<bool>()) {
      return Error(pointer + "/uniqueItems", "keyword \"uniqueItems\" is not supported (only false)");
    }
    constraints.erase(std::find(constraints.begin(), constraints.end(), "uniqueItems"));
  }
  auto alone = [&](const char* keyword) -> absl::Status {
    if (constraints.size() == 1) return absl::OkStatus();
    std::vector<std::string> others;
    for (const std::string& c : constraints) {
      if (c != keyword) others.push_back(c);
    }
    return Error(pointer, absl::StrCat("\"", keyword, "\" beside other constraints (",
                                       absl::StrJoin(others, ", "), ") is not supported"));
  };
  if (auto it = schema.find("$ref"); it != schema.end()) {
    if (absl::Status s = alone("$ref"); !s.ok()) return s;
    if (!it->is_string()) return Error(pointer + "/$ref", "$ref must be a string");
    return Ref(it->get<std::string>(), pointer);
  }
  if (auto it = schema.find("allOf"); it != schema.end()) {
    if (absl::Status s = alone("allOf"); !s.ok()) return s;
    if (!it->is_array() || it->size() != 1) {
      return Error(pointer + "/allOf", "allOf is supported only with exactly one member");
    }
    return At((*it)[0], pointer + "/allOf/0");
  }
  for (const char* keyword : {"anyOf", "oneOf"}) {
    auto it = schema.find(keyword);
    if (it == schema.end()) continue;
    if (absl::Status s = alone(keyword); !s.ok()) return s;
    if (!it->is_array() || it->empty()) {
      return Error(pointer + "/" + keyword, absl::StrCat(keyword, " must be a non-empty array"));
    }
    auto id = NewNode(pointer, NodeKind::kAnyOf);
    if (!id.ok()) return id.status();
    std::vector<uint32_t> alts;
    for (size_t i = 0; i < it->size(); ++i) {
      auto alt = At((*it)[i], absl::StrCat(pointer, "/", keyword, "/", i));
      if (!alt.ok()) return alt.status();
      alts.push_back(*alt);
    }
    out_.nodes[*id].alternatives = std::move(alts);
    return *id;
  }
  // enum / const: the values themselves, filtered by the other keywords once compiled.
  const bool has_enum = schema.contains("enum") || schema.contains("const");
  uint32_t literal = kNone;
  if (has_enum) {
    uint32_t depth = 0;
    auto lits = Literals(schema, pointer, depth);
    if (!lits.ok()) return lits.status();
    auto id = LiteralNode(pointer, std::move(*lits), depth);
    if (!id.ok()) return id.status();
    literal = *id;
  }
  // Types: those listed, or all when "type" is absent (keywords apply per type).
  std::vector<std::string> types;
  if (auto it = schema.find("type"); it != schema.end()) {
    const std::set<std::string> known = {"object", "array",   "string", "number",
                                         "integer", "boolean", "null"};
    auto bad_type = [&](const Json& t) {
      return Error(pointer + "/type", absl::StrCat("type ", t.dump(), " is not one of ",
                                                    "object, array, string, number, integer, "
                                                    "boolean, null"));
    };
    if (it->is_string()) {
      types.push_back(it->get<std::string>());
    } else if (it->is_array() && !it->empty()) {
      for (const Json& t : *it) {
        if (!t.is_string()) return bad_type(t);
        if (std::find(types.begin(), types.end(), t.get<std::string>()) != types.end()) {
          return Error(pointer + "/type", absl::StrCat("type \"", t.get<std::string>(),
                                                        "\" is listed twice"));
        }
        types.push_back(t.get<std::string>());
      }
    } else {
      return bad_type(*it);
    }
    for (const std::string& t : types) {
      if (!known.contains(t)) return bad_type(t);
    }
  } else {
    bool typed_keywords = false;
    for (const std::string& c : constraints) {
      typed_keywords |= kObjectKeywords.contains(c) || kArrayKeywords.contains(c) ||
                        kStringKeywords.contains(c) || kNumberKeywords.contains(c);
    }
    if (!typed_keywords) {
      if (literal != kNone) return literal;
      return AnyNode();
    }
    types = {"object", "array", "string", "number", "boolean", "null"};
  }
  // number admits every integer; with both listed, "integer" adds nothing.
  if (std::find(types.begin(), types.end(), "number") != types.end()) {
    types.erase(std::remove(types.begin(), types.end(), "integer"), types.end());
  }
  std::vector<uint32_t> typed;
  for (const std::string& t : types) {
    auto id = Typed(schema, pointer, t);
    if (!id.ok()) return id.status();
    typed.push_back(*id);
  }
  uint32_t result = typed[0];
  if (typed.size() > 1) {
    auto id = NewNode(pointer, NodeKind::kAnyOf);
    if (!id.ok()) return id.status();
    out_.nodes[*id].alternatives = typed;
    result = *id;
  }
  if (literal == kNone) return result;
  filters_.emplace_back(literal, result);
  return literal;
}

absl::StatusOr<uint32_t> Compiler::Typed(const Json& schema, const std::string& pointer,
                                         const std::string& type) {
  if (type == "object") return Object(schema, pointer);
  if (type == "array") return Array(schema, pointer);
  if (type == "string") return String(schema, pointer);
  if (type == "integer") return Numeric(ReadIntegerKeywords(schema, pointer), pointer);
  if (type == "number") return Numeric(ReadNumberKeywords(schema, pointer), pointer);
  if (type == "boolean") return LiteralNode(pointer, {"false", "true"}, 0);
  return LiteralNode(pointer, {"null"}, 0);
}

absl::StatusOr<uint64_t> Compiler::Count(const Json& schema, const std::string& pointer,
                                         const char* keyword, uint64_t fallback) {
  auto it = schema.find(keyword);
  if (it == schema.end()) return fallback;
  if (it->is_number_unsigned() || (it->is_number_integer() && it->get<int64_t>() >= 0)) {
    return it->get<uint64_t>();
  }
  if (it->is_number_float() && it->get<double>() >= 0 && it->get<double>() < 1e18 &&
      std::floor(it->get<double>()) == it->get<double>()) {
    return static_cast<uint64_t>(it->get<double>());
  }
  return Error(pointer + "/" + keyword,
               absl::StrCat(keyword, " must be a non-negative integer; got ", it->dump()));
}

absl::StatusOr<uint32_t> Compiler::Object(const Json& schema, const std::string& pointer) {
  auto id = NewNode(pointer, NodeKind::kObject);
  if (!id.ok()) return id.status();
  std::vector<PropertyEntry> entries;
  if (auto it = schema.find("properties"); it != schema.end()) {
    if (!it->is_object()) return Error(pointer + "/properties", "properties must be an object");
    for (const auto& [name, sub] : it->items()) {
      auto value = At(sub, pointer + "/properties/" + EscapePointerToken(name));
      if (!value.ok()) return value.status();
      entries.push_back({CanonicalJsonString(name), *value, false});
    }
  }
  uint32_t additional = strict_ ? kNone : kNone - 1;  // kNone - 1: "any", resolved below
  if (auto it = schema.find("additionalProperties"); it != schema.end()) {
    if (it->is_boolean()) {
      additional = it->get<bool>() ? kNone - 1 : kNone;
    } else {
      auto sub = At(*it, pointer + "/additionalProperties");
      if (!sub.ok()) return sub.status();
      additional = *sub;
    }
  }
  if (additional == kNone - 1) {
    auto any = AnyNode();
    if (!any.ok()) return any.status();
    additional = *any;
  }
  if (auto it = schema.find("required"); it != schema.end()) {
    if (!it->is_array()) return Error(pointer + "/required", "required must be an array");
    std::set<std::string> seen;
    for (const Json& r : *it) {
      if (!r.is_string()) {
        return Error(pointer + "/required", absl::StrCat("required lists ", r.dump(),
                                                          ", not a property name"));
      }
      const std::string key = CanonicalJsonString(r.get<std::string>());
      if (!seen.insert(key).second) continue;
      auto e = std::find_if(entries.begin(), entries.end(),
                            [&](const PropertyEntry& p) { return p.key == key; });
      if (e != entries.end()) {
        e->required = true;
        continue;
      }
      if (additional == kNone) {
        return Error(pointer + "/required",
                     absl::StrCat("required property \"", r.get<std::string>(),
                                  "\" is not in properties and no other property is allowed",
                                  strict_ ? " (strict: additionalProperties defaults to false)"
                                          : ""));
      }
      entries.push_back({key, additional, true});  // written after the listed properties
    }
  }
  Node& o = out_.nodes[*id];
  o.entries = std::move(entries);
  o.additional = additional;
  o.first_required.assign(o.entries.size() + 1, o.entries.size());
  for (size_t i = o.entries.size(); i-- > 0;) {
    o.first_required[i] = o.entries[i].required ? i : o.first_required[i + 1];
  }
  if (absl::Status s = AddKeyMatcher(out_.nodes[*id], pointer); !s.ok()) return s;
  return *id;
}

absl::StatusOr<uint32_t> Compiler::Array(const Json& schema, const std::string& pointer) {
  auto id = NewNode(pointer, NodeKind::kArray);
  if (!id.ok()) return id.status();
  std::vector<uint32_t> prefix;
  if (auto it = schema.find("prefixItems"); it != schema.end()) {
    if (!it->is_array()) return Error(pointer + "/prefixItems", "prefixItems must be an array");
    for (size_t i = 0; i < it->size(); ++i) {
      auto item = At((*it)[i], absl::StrCat(pointer, "/prefixItems/", i));
      if (!item.ok()) return item.status();
      prefix.push_back(*item);
    }
  }
  uint32_t items = kNone;
  if (auto it = schema.find("items"); it != schema.end()) {
    if (it->is_array()) {
      return Error(pointer + "/items", "items as an array (draft 4 to 2019-09 tuples) is not "
                                       "supported; use prefixItems");
    }
    if (!(it->is_boolean() && !it->get<bool>())) {
      auto item = At(*it, pointer + "/items");
      if (!item.ok()) return item.status();
      items = *item;
    }
  } else if (!(strict_ && !prefix.empty())) {
    auto any = AnyNode();
    if (!any.ok()) return any.status();
    items = *any;
  }
  auto min_items = Count(schema, pointer, "minItems", 0);
  if (!min_items.ok()) return min_items.status();
  auto max_items = Count(schema, pointer, "maxItems", kUnbounded);
  if (!max_items.ok()) return max_items.status();
  if (*min_items > *max_items) {
    return Error(pointer, absl::StrCat("minItems ", *min_items, " > maxItems ", *max_items,
                                       ": no array fits"));
  }
  if (*min_items > (uint64_t{1} << 20)) {
    return Error(pointer + "/minItems", absl::StrCat("minItems ", *min_items, " is too large"));
  }
  Node& a = out_.nodes[*id];
  a.prefix = std::move(prefix);
  a.items = items;
  a.min_items = *min_items;
  a.max_items = *max_items;
  a.count_cap = std::max<uint64_t>({a.prefix.size(), a.min_items,
                                    a.max_items == kUnbounded ? 0 : a.max_items});
  return *id;
}

absl::StatusOr<uint32_t> Compiler::String(const Json& schema, const std::string& pointer) {
  auto min_len = Count(schema, pointer, "minLength", 0);
  if (!min_len.ok()) return min_len.status();
  auto max_len = Count(schema, pointer, "maxLength", kUnbounded);
  if (!max_len.ok()) return max_len.status();
  if (*min_len > *max_len) {
    return Error(pointer, absl::StrCat("minLength ", *min_len, " > maxLength ", *max_len,
                                       ": no string fits"));
  }
  std::vector<std::pair<std::string, std::string>> patterns;  // (pointer, pattern)
  if (auto it = schema.find("pattern"); it != schema.end()) {
    if (!it->is_string()) return Error(pointer + "/pattern", "pattern must be a string");
    patterns.emplace_back(pointer + "/pattern", it->get<std::string>());
  }
  if (auto it = schema.find("format"); it != schema.end()) {
    if (!it->is_string()) return Error(pointer + "/format", "format must be a string");
    auto p = FormatPattern(it->get<std::string>());
    if (!p.ok()) return Error(pointer + "/format", p.status().message());
    patterns.emplace_back(pointer + "/format", *p);
  }
  if (patterns.empty()) {
    const std::string key = absl::StrCat("string ", *min_len, " ", *max_len);
    if (auto it = leaf_by_key_.find(key); it != leaf_by_key_.end()) return it->second;
    auto id = NewNode(pointer, NodeKind::kString);
    if (!id.ok()) return id.status();
    out_.nodes[*id].min_len = *min_len;
    out_.nodes[*id].max_len = *max_len;
    leaf_by_key_.emplace(key, *id);
    return id;
  }
  const size_t budget = kMaxSchemaDfaStates - std::min(dfa_states_, kMaxSchemaDfaStates);
  std::optional<Dfa> dfa;
  for (const auto& [where, pattern] : patterns) {
    auto d = CompilePattern(pattern, budget);
    if (!d.ok()) return Error(where, d.status().message());
    if (dfa.has_value()) {
      auto both = Intersect(*dfa, *d, budget);
      if (!both.ok()) return Error(where, both.status().message());
      dfa = std::move(*both);
    } else {
      dfa = std::move(*d);
    }
  }
  if (*min_len > 0 || *max_len != kUnbounded) {
    auto length = LengthDfa(*min_len, *max_len, budget);
    if (!length.ok()) return Error(pointer, length.status().message());
    auto both = Intersect(*dfa, *length, budget);
    if (!both.ok()) return Error(pointer, both.status().message());
    dfa = std::move(*both);
  }
  if (dfa->Empty()) return Error(pointer, "no string matches the pattern / format and length");
  auto id = NewNode(pointer, NodeKind::kString);
  if (!id.ok()) return id.status();
  uint32_t dfa_id = kNone;
  if (absl::Status s = AddDfa(std::move(*dfa), pointer, dfa_id); !s.ok()) return s;
  out_.nodes[*id].dfa = dfa_id;
  out_.nodes[*id].min_len = *min_len;
  out_.nodes[*id].max_len = *max_len;
  return id;
}

// A node for what the number keywords admit (schema_number_keywords.h); integer and number
// nodes with equal parameters are shared.
absl::StatusOr<uint32_t> Compiler::Numeric(const absl::StatusOr<NumericValues>& values,
                                           const std::string& pointer) {
  if (!values.ok()) return values.status();
  if (const auto* listed = std::get_if<ListedValues>(&*values)) {
    return LiteralNode(pointer, listed->texts, 0);
  }
  if (const auto* integers = std::get_if<IntegerValues>(&*values)) {
    const std::string key = absl::StrCat("integer ", integers->has_lo, " ", integers->lo, " ",
                                         integers->has_hi, " ", integers->hi, " ",
                                         integers->multiple);
    if (auto it = leaf_by_key_.find(key); it != leaf_by_key_.end()) return it->second;
    auto id = NewNode(pointer, NodeKind::kInteger);
    if (!id.ok()) return id.status();
    Node& n = out_.nodes[*id];
    n.has_lo = integers->has_lo;
    n.has_hi = integers->has_hi;
    n.lo = integers->lo;
    n.hi = integers->hi;
    n.multiple = integers->multiple;
    leaf_by_key_.emplace(key, *id);
    return id;
  }
  const DecimalRange& range = std::get<NumberValues>(*values).range;
  const std::string key =
      absl::StrCat("number ", range.lower.has_value() ? range.lower->Text() : "-", " ",
                   range.upper.has_value() ? range.upper->Text() : "-");
  if (auto it = leaf_by_key_.find(key); it != leaf_by_key_.end()) return it->second;
  auto id = NewNode(pointer, NodeKind::kNumber);
  if (!id.ok()) return id.status();
  if (range.lower.has_value() || range.upper.has_value()) {
    const size_t budget = kMaxSchemaDfaStates - std::min(dfa_states_, kMaxSchemaDfaStates);
    auto dfa = NumberRangeDfa(range, budget);
    if (!dfa.ok()) return Error(pointer, dfa.status().message());
    if (dfa->Empty()) return Error(pointer, "no number lies between the bounds");
    uint32_t dfa_id = kNone;
    if (absl::Status st = AddDfa(std::move(*dfa), pointer, dfa_id); !st.ok()) return st;
    out_.nodes[*id].dfa = dfa_id;
  }
  leaf_by_key_.emplace(key, *id);
  return id;
}

// enum / const values as canonical JSON texts (compact, keys in the schema's order).
absl::StatusOr<std::vector<std::string>> Compiler::Literals(const Json& schema,
                                                            const std::string& pointer,
                                                            uint32_t& depth) {
  std::vector<Json> values;
  std::string where = pointer + "/enum";
  if (auto it = schema.find("enum"); it != schema.end()) {
    if (!it->is_array()) return Error(where, "enum must be an array");
    if (it->empty()) return Error(where, "enum is empty: no value fits");
    if (it->size() > kMaxEnumValues) {
      return Error(where, absl::StrCat("enum has ", it->size(), " values; at most ",
                                       kMaxEnumValues, " are supported"));
    }
    values.assign(it->begin(), it->end());
  }
  if (auto it = schema.find("const"); it != schema.end()) {
    where = pointer + "/const";
    if (schema.contains("enum")) {
      // Both: the enum's values equal to the const.
      const nlohmann::json c = nlohmann::json::parse(it->dump());
      std::erase_if(values, [&](const Json& v) { return nlohmann::json::parse(v.dump()) != c; });
      if (values.empty()) return Error(pointer, "no enum value equals const");
    } else {
      values = {*it};
    }
  }
  std::vector<std::string> texts;
  for (const Json& v : values) {
    bool exact = true;
    std::vector<const Json*> stack = {&v};
    while (!stack.empty()) {
      const Json* j = stack.back();
      stack.pop_back();
      if (j->is_number_float() && !(std::fabs(j->get<double>()) < 9007199254740992.0)) {
        exact = false;
      }
      if (j->is_structured()) {
        for (const Json& c : *j) stack.push_back(&c);
      }
    }
    if (!exact) {
      return Error(where, absl::StrCat("the number in ", v.dump(), " cannot be matched exactly "
                                       "(a float at or past 2^53)"));
    }
    texts.push_back(v.dump());
    depth = std::max<uint32_t>(depth, DocumentDepth(v) - 1);
  }
  return texts;
}


absl::Status Compiler::AddKeyMatcher(Node& object, const std::string& pointer) {
  std::vector<std::string> keys;
  for (const PropertyEntry& e : object.entries) keys.push_back(e.key);
  const size_t budget = kMaxSchemaDfaStates - std::min(dfa_states_, kMaxSchemaDfaStates);
  auto km = BuildKeyMatcher(keys, object.additional != kNone, budget);
  if (!km.ok()) return Error(pointer, km.status().message());
  dfa_states_ += km->dfa.states();
  if (dfa_states_ > kMaxSchemaDfaStates) {
    return Error(pointer, absl::StrCat("the schema's patterns, formats and property names need "
                                       "more than ", kMaxSchemaDfaStates, " automaton states"));
  }
  object.key_matcher = static_cast<uint32_t>(out_.key_matchers.size());
  out_.key_matchers.push_back(std::move(*km));
  return absl::OkStatus();
}

// Keeps the enum / const values that the keywords beside them admit (running the recognizer
// over each canonical text); true when a value was dropped.
bool Compiler::FilterLiterals() {
  bool dropped = false;
  for (auto [literal, rule] : filters_) {
    std::vector<std::string>& lits = out_.nodes[literal].literals;
    const size_t before = lits.size();
    std::erase_if(lits, [&](const std::string& text) {
      SchemaState state = StartState(out_, rule), next;
      for (char c : text) {
        if (!Step(out_, state, static_cast<uint8_t>(c), next)) return true;
        state.swap(next);
      }
      return !CanEnd(out_, state);
    });
    dropped |= lits.size() != before;
  }
  return dropped;
}

absl::StatusOr<CompiledSchema> Compiler::Run() {
  auto root = At(doc_, "");
  if (!root.ok()) return root.status();
  out_.root = *root;
  ComputeLeaves(out_);
  ComputeMinDepth(out_);
  while (!filters_.empty() && FilterLiterals()) ComputeMinDepth(out_);
  for (auto [literal, rule] : filters_) {
    (void)rule;
    if (out_.nodes[literal].literals.empty()) {
      return absl::InvalidArgumentError(
          "json_schema: no enum / const value satisfies the keywords beside it");
    }
  }
  if (out_.nodes[out_.root].min_depth == kUnsatisfiable) {
    return absl::InvalidArgumentError(absl::StrCat(
        "json_schema: the schema admits no JSON value within the nesting limit of ", kMaxDepth,
        " (a required property or item that can never be written, e.g. one that requires "
        "itself, or false)"));
  }
  return std::move(out_);
}

}  // namespace

absl::StatusOr<CompiledSchema> CompileSchemaText(std::string_view text, bool strict) {
  try {
    const Json doc = Json::parse(text);
    if (DocumentDepth(doc) > kMaxDocumentDepth) {
      return absl::InvalidArgumentError(absl::StrCat("json_schema: the schema nests deeper than ",
                                                     kMaxDocumentDepth, " levels"));
    }
    Compiler compiler(doc, strict);
    return compiler.Run();
  } catch (const nlohmann::json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat("json_schema: the schema is not JSON: ",
                                                   e.what()));
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("json_schema: ", e.what()));
  }
}

}  // namespace mlaserve::model::schema_internal
