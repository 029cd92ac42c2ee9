// The builtin filters over sequences and mappings (Jinja2 3.1's filters.py): the lazy ones
// (map, select, reject, selectattr, rejectattr, unique, items, batch, slice) return an
// Iterator (value.h): consumed once, always true, with an element's error raised when
// iteration reaches it; the others (sort, dictsort, min, max, sum, join, first, last,
// reverse) consume what they are given. filters.cc registers them under their names.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "router/chat_template/call_args.h"
#include "router/chat_template/value.h"

namespace mlaserve::router::chat_template::sequence_filters {

using Args = std::vector<Value>;

absl::StatusOr<Value> SelectOrReject(const Value& value, const Args& args, const KwArgs& kwargs, bool select,
                                     bool lookup_attr);
absl::StatusOr<Value> Map(const Value& value, const Args& args, const KwArgs& kwargs);
absl::StatusOr<Value> Unique(const Value& value, const Args& args, const KwArgs& kwargs);
absl::StatusOr<Value> MinMax(const Value& value, const Args& args, const KwArgs& kwargs, bool max);
absl::StatusOr<Value> Sort(const Value& value, const Args& args, const KwArgs& kwargs);
absl::StatusOr<Value> DictSort(const Value& value, const Args& args, const KwArgs& kwargs);
absl::StatusOr<Value> Sum(const Value& value, const Args& args, const KwArgs& kwargs);
absl::StatusOr<Value> Join(const Value& value, const Args& args, const KwArgs& kwargs);
absl::StatusOr<Value> Batch(const Value& value, const Args& args, const KwArgs& kwargs);
absl::StatusOr<Value> SliceFilter(const Value& value, const Args& args, const KwArgs& kwargs);
absl::StatusOr<Value> First(const Value& value);
absl::StatusOr<Value> Last(const Value& value);
absl::StatusOr<Value> Reverse(const Value& value);
absl::StatusOr<Value> Items(const Value& value);
// groupby(attribute, default=None, case_sensitive=False): a list of _GroupTuples.
absl::StatusOr<Value> GroupBy(const Value& value, const Args& args, const KwArgs& kwargs);

}  // namespace mlaserve::router::chat_template::sequence_filters
