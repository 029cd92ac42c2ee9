// admin.proto <-> router domain conversion, as small free functions tested on their own.
#pragma once

#include "absl/status/statusor.h"
#include "mlaserve/v1/admin.pb.h"
#include "router/worker_types.h"

namespace mlaserve::router {

// INVALID_ARGUMENT naming the value for WORKER_ROLE_UNSPECIFIED or an unknown number.
absl::StatusOr<WorkerRole> RoleFromProto(v1::WorkerRole role);
v1::WorkerRole RoleToProto(WorkerRole role);
v1::WorkerState StateToProto(WorkerState state);
v1::WorkerSource SourceToProto(WorkerSource source);

WorkerLoad LoadFromProto(const v1::WorkerLoad& proto);
v1::WorkerLoad LoadToProto(const WorkerLoad& load);
WorkerProfile ProfileFromProto(const v1::WorkerProfile& proto);
v1::WorkerProfile ProfileToProto(const WorkerProfile& profile);
ModelIdentity ModelFromProto(const v1::ModelIdentity& proto);
v1::ModelIdentity ModelToProto(const ModelIdentity& model);

// INVALID_ARGUMENT when the role is unspecified.
absl::StatusOr<WorkerDescriptor> DescriptorFromProto(const v1::WorkerDescriptor& proto);
v1::WorkerDescriptor DescriptorToProto(const WorkerDescriptor& descriptor);

v1::WorkerStatus StatusToProto(const WorkerSnapshot& snapshot);

}  // namespace mlaserve::router
