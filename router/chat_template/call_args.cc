#include "router/chat_template/call_args.h"

#include "absl/strings/str_cat.h"

namespace mlaserve::router::chat_template {

absl::StatusOr<std::vector<Value>> BindArgs(std::string_view what, const std::vector<Value>& args,
                                            const KwArgs& kwargs, std::initializer_list<Param> params,
                                            bool positional_only) {
  if (args.size() > params.size()) {
    return TypeError(absl::StrCat(std::string(what), " takes at most ", params.size(), " argument(s) (", args.size(), " given)"));
  }
  if (positional_only && !kwargs.empty()) return TypeError(absl::StrCat(std::string(what), " takes no keyword arguments"));
  std::vector<std::optional<Value>> bound(params.size());
  for (size_t i = 0; i < args.size(); ++i) bound[i] = args[i];
  for (const auto& [k, v] : kwargs) {
    size_t i = 0;
    for (const Param& p : params) {
      if (p.name == k) break;
      ++i;
    }
    if (i == params.size()) return TypeError(absl::StrCat(std::string(what), " got an unexpected keyword argument '", k, "'"));
    if (bound[i]) return TypeError(absl::StrCat(std::string(what), " got multiple values for argument '", k, "'"));
    bound[i] = v;
  }
  std::vector<Value> out;
  size_t i = 0;
  for (const Param& p : params) {
    if (bound[i]) {
      out.push_back(*bound[i]);
    } else if (p.default_value) {
      out.push_back(*p.default_value);
    } else {
      return TypeError(absl::StrCat(std::string(what), " missing required argument '", std::string(p.name), "'"));
    }
    ++i;
  }
  return out;
}

absl::Status UndefinedError(const Value& v) {
  return absl::InvalidArgumentError(v.undefined_name().empty() ? "a value is undefined" : v.undefined_name());
}

absl::StatusOr<int64_t> IntArg(std::string_view what, const Value& v) {
  if (v.is_undefined()) return UndefinedError(v);
  if (!v.is_int() && !v.is_bool()) {
    return TypeError(absl::StrCat(std::string(what), ": '", v.TypeName(), "' object cannot be interpreted as an integer"));
  }
  return v.as_int();
}

absl::StatusOr<std::optional<std::string>> OptionalStrArg(std::string_view what, const Value& v) {
  if (v.is_none()) return std::optional<std::string>();
  if (v.is_string()) return std::optional<std::string>(v.as_string());
  if (v.is_undefined()) return UndefinedError(v);
  return TypeError(absl::StrCat(std::string(what), ": expected str or None, not ", v.TypeName()));
}

}  // namespace mlaserve::router::chat_template
