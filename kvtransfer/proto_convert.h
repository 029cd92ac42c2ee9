// kvtransfer domain types <-> mlaserve.v1 protos (kv.proto). Proto types stay at the edge:
// only the tcp transport and the workers' RPC layers call these.
#pragma once

#include "absl/status/statusor.h"
#include "kvtransfer/layout.h"
#include "kvtransfer/transport.h"
#include "mlaserve/v1/kv.pb.h"

namespace mlaserve::kvtransfer {

mlaserve::v1::KvLayout ToProto(const KvLayout& layout);
// INVALID_ARGUMENT for an unknown dtype or a compat_hash that does not match the fields.
absl::StatusOr<KvLayout> FromProto(const mlaserve::v1::KvLayout& proto);

mlaserve::v1::KvSessionRef ToProto(const KvSessionRef& ref);
// INVALID_ARGUMENT naming the field when session_id / endpoint is empty or num_pages < 0.
absl::StatusOr<KvSessionRef> FromProto(const mlaserve::v1::KvSessionRef& proto);

}  // namespace mlaserve::kvtransfer
