#include "router/admin_service.h"

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "router/admin_conversion.h"

namespace mlaserve::router {
namespace {

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(common::ToGrpcStatus(status));
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* AdminService::ListWorkers(grpc::CallbackServerContext* context,
                                                    const v1::ListWorkersRequest* request,
                                                    v1::ListWorkersResponse* response) {
  if (auto* refused = common::RefuseUnlessAllowed(authorizer_, context, common::Privilege::kAdmin)) {
    return refused;
  }
  std::optional<WorkerRole> role;
  if (request->role() != v1::WORKER_ROLE_UNSPECIFIED) {
    absl::StatusOr<WorkerRole> r = RoleFromProto(request->role());
    if (!r.ok()) return Done(context, r.status());
    role = *r;
  }
  for (const WorkerSnapshot& w : router_->registry().List(role)) {
    *response->add_workers() = StatusToProto(w);
  }
  return Done(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* AdminService::GetWorker(grpc::CallbackServerContext* context,
                                                  const v1::GetWorkerRequest* request,
                                                  v1::WorkerStatus* response) {
  if (auto* refused = common::RefuseUnlessAllowed(authorizer_, context, common::Privilege::kAdmin)) {
    return refused;
  }
  absl::StatusOr<WorkerSnapshot> w = router_->registry().Get(request->id());
  if (w.ok()) *response = StatusToProto(*w);
  return Done(context, w.status());
}

grpc::ServerUnaryReactor* AdminService::AddWorker(grpc::CallbackServerContext* context,
                                                  const v1::AddWorkerRequest* request,
                                                  v1::WorkerStatus* response) {
  if (auto* refused = common::RefuseUnlessAllowed(authorizer_, context, common::Privilege::kAdmin)) {
    return refused;
  }
  absl::StatusOr<WorkerRole> role = RoleFromProto(request->role());
  if (!role.ok()) return Done(context, role.status());
  absl::StatusOr<std::string> id =
      router_->registry().AddByAddress(*role, request->address(), WorkerSource::kAdmin);
  if (!id.ok()) return Done(context, id.status());
  if (on_worker_added_) on_worker_added_();
  absl::StatusOr<WorkerSnapshot> w = router_->registry().Get(*id);
  if (w.ok()) *response = StatusToProto(*w);
  return Done(context, w.status());
}

grpc::ServerUnaryReactor* AdminService::RemoveWorker(grpc::CallbackServerContext* context,
                                                     const v1::RemoveWorkerRequest* request,
                                                     v1::RemoveWorkerResponse*) {
  if (auto* refused = common::RefuseUnlessAllowed(authorizer_, context, common::Privilege::kAdmin)) {
    return refused;
  }
  return Done(context, router_->registry().Remove(request->id()));
}

grpc::ServerUnaryReactor* AdminService::DrainWorker(grpc::CallbackServerContext* context,
                                                    const v1::DrainWorkerRequest* request,
                                                    v1::WorkerStatus* response) {
  if (auto* refused = common::RefuseUnlessAllowed(authorizer_, context, common::Privilege::kAdmin)) {
    return refused;
  }
  absl::StatusOr<WorkerSnapshot> w = router_->registry().Drain(request->id());
  if (w.ok()) *response = StatusToProto(*w);
  return Done(context, w.status());
}

grpc::ServerUnaryReactor* AdminService::GetLoads(grpc::CallbackServerContext* context,
                                                 const v1::GetLoadsRequest*,
                                                 v1::GetLoadsResponse* response) {
  if (auto* refused = common::RefuseUnlessAllowed(authorizer_, context, common::Privilege::kAdmin)) {
    return refused;
  }
  for (const WorkerSnapshot& w : router_->registry().List()) {
    v1::WorkerLoadEntry* e = response->add_workers();
    e->set_id(w.id);
    e->set_role(RoleToProto(w.role));
    e->set_address(w.address);
    e->set_state(StateToProto(w.state));
    *e->mutable_load() = LoadToProto(w.descriptor.load);
    e->set_router_inflight(w.router_inflight);
  }
  return Done(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* AdminService::RegisterWorker(grpc::CallbackServerContext* context,
                                                       const v1::RegisterWorkerRequest* request,
                                                       v1::RegisterWorkerResponse* response) {
  if (auto* refused = common::RefuseUnlessAllowed(authorizer_, context, common::Privilege::kCluster)) {
    return refused;
  }
  absl::StatusOr<WorkerDescriptor> d = DescriptorFromProto(request->worker());
  if (!d.ok()) return Done(context, d.status());
  absl::StatusOr<WorkerRegistry::Registration> r = router_->registry().Register(*d, absl::Now());
  if (!r.ok()) return Done(context, r.status());
  response->set_worker_id(r->id);
  response->set_heartbeat_interval_ms(static_cast<int32_t>(absl::ToInt64Milliseconds(r->heartbeat_interval)));
  response->set_heartbeat_timeout_ms(static_cast<int32_t>(absl::ToInt64Milliseconds(r->heartbeat_timeout)));
  if (on_worker_added_) on_worker_added_();
  return Done(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* AdminService::Heartbeat(grpc::CallbackServerContext* context,
                                                  const v1::HeartbeatRequest* request,
                                                  v1::HeartbeatResponse* response) {
  if (auto* refused = common::RefuseUnlessAllowed(authorizer_, context, common::Privilege::kCluster)) {
    return refused;
  }
  absl::StatusOr<bool> draining =
      router_->registry().Heartbeat(request->worker_id(), LoadFromProto(request->load()), absl::Now());
  if (draining.ok()) response->set_draining(*draining);
  return Done(context, draining.status());
}

grpc::ServerUnaryReactor* AdminService::UndrainWorker(grpc::CallbackServerContext* context,
                                                      const v1::UndrainWorkerRequest* request,
                                                      v1::WorkerStatus* response) {
  if (auto* refused = common::RefuseUnlessAllowed(authorizer_, context, common::Privilege::kAdmin)) {
    return refused;
  }
  absl::StatusOr<WorkerSnapshot> w = router_->registry().Undrain(request->id());
  if (w.ok()) *response = StatusToProto(*w);
  if (w.ok() && on_worker_added_) on_worker_added_();  // routable again: poll it now
  return Done(context, w.status());
}

grpc::ServerUnaryReactor* AdminService::GetProfiles(grpc::CallbackServerContext* context,
                                                    const v1::GetProfilesRequest* request,
                                                    v1::GetProfilesResponse* response) {
  if (auto* refused = common::RefuseUnlessAllowed(authorizer_, context, common::Privilege::kAdmin)) {
    return refused;
  }
  std::vector<WorkerSnapshot> workers;
  if (request->worker_id().empty()) {
    workers = router_->registry().List();
  } else {
    absl::StatusOr<WorkerSnapshot> w = router_->registry().Get(request->worker_id());
    if (!w.ok()) return Done(context, w.status());
    workers.push_back(*std::move(w));
  }
  for (const WorkerSnapshot& w : workers) {
    v1::WorkerProfileEntry* e = response->add_workers();
    e->set_id(w.id);
    e->set_role(RoleToProto(w.role));
    e->set_address(w.address);
    *e->mutable_profile() = ProfileToProto(w.descriptor.profile);
  }
  return Done(context, absl::OkStatus());
}

}  // namespace mlaserve::router
