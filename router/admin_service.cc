#include "router/admin_service.h"

#include "absl/strings/str_cat.h"
#include "common/call_auth.h"
#include "common/status.h"
#include "router/admin_conversion.h"

namespace mlaserve::router {

grpc::ServerUnaryReactor* AdminService::ListWorkers(grpc::CallbackServerContext* context,
                                                    const v1::ListWorkersRequest* request,
                                                    v1::ListWorkersResponse* response) {
  return common::AnswerUnary(
      authorizer_, context, common::Privilege::kAdmin, [&]() -> absl::Status {
        std::optional<WorkerRole> role;
        if (request->role() != v1::WORKER_ROLE_UNSPECIFIED) {
          absl::StatusOr<WorkerRole> r = RoleFromProto(request->role());
          if (!r.ok()) return r.status();
          role = *r;
        }
        for (const WorkerSnapshot& w : router_->registry().List(role)) {
          *response->add_workers() = StatusToProto(w);
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* AdminService::GetWorker(grpc::CallbackServerContext* context,
                                                  const v1::GetWorkerRequest* request,
                                                  v1::WorkerStatus* response) {
  return common::AnswerUnary(
      authorizer_, context, common::Privilege::kAdmin, [&]() -> absl::Status {
        absl::StatusOr<WorkerSnapshot> w = router_->registry().Get(request->id());
        if (w.ok()) *response = StatusToProto(*w);
        return w.status();
      });
}

grpc::ServerUnaryReactor* AdminService::AddWorker(grpc::CallbackServerContext* context,
                                                  const v1::AddWorkerRequest* request,
                                                  v1::WorkerStatus* response) {
  return common::AnswerUnary(
      authorizer_, context, common::Privilege::kAdmin, [&]() -> absl::Status {
        absl::StatusOr<WorkerRole> role = RoleFromProto(request->role());
        if (!role.ok()) return role.status();
        absl::StatusOr<std::string> id =
            router_->registry().AddByAddress(*role, request->address(), WorkerSource::kAdmin);
        if (!id.ok()) return id.status();
        if (on_worker_added_) on_worker_added_();
        absl::StatusOr<WorkerSnapshot> w = router_->registry().Get(*id);
        if (w.ok()) *response = StatusToProto(*w);
        return w.status();
      });
}

grpc::ServerUnaryReactor* AdminService::RemoveWorker(grpc::CallbackServerContext* context,
                                                     const v1::RemoveWorkerRequest* request,
                                                     v1::RemoveWorkerResponse*) {
  return common::AnswerUnary(
      authorizer_, context, common::Privilege::kAdmin, [&]() -> absl::Status {
        return router_->registry().Remove(request->id());
      });
}

grpc::ServerUnaryReactor* AdminService::DrainWorker(grpc::CallbackServerContext* context,
                                                    const v1::DrainWorkerRequest* request,
                                                    v1::WorkerStatus* response) {
  return common::AnswerUnary(
      authorizer_, context, common::Privilege::kAdmin, [&]() -> absl::Status {
        absl::StatusOr<WorkerSnapshot> w = router_->registry().Drain(request->id());
        if (w.ok()) *response = StatusToProto(*w);
        return w.status();
      });
}

grpc::ServerUnaryReactor* AdminService::GetLoads(grpc::CallbackServerContext* context,
                                                 const v1::GetLoadsRequest*,
                                                 v1::GetLoadsResponse* response) {
  return common::AnswerUnary(
      authorizer_, context, common::Privilege::kAdmin, [&]() -> absl::Status {
        for (const WorkerSnapshot& w : router_->registry().List()) {
          v1::WorkerLoadEntry* e = response->add_workers();
          e->set_id(w.id);
          e->set_role(RoleToProto(w.role));
          e->set_address(w.address);
          e->set_state(StateToProto(w.state));
          *e->mutable_load() = LoadToProto(w.descriptor.load);
          e->set_router_inflight(w.router_inflight);
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* AdminService::RegisterWorker(grpc::CallbackServerContext* context,
                                                       const v1::RegisterWorkerRequest* request,
                                                       v1::RegisterWorkerResponse* response) {
  return common::AnswerUnary(
      authorizer_, context, common::Privilege::kCluster, [&]() -> absl::Status {
        ASSIGN_OR_RETURN(WorkerDescriptor d, DescriptorFromProto(request->worker()));
        ASSIGN_OR_RETURN(WorkerRegistry::Registration r,
                         router_->registry().Register(d, absl::Now()));
        response->set_worker_id(r.id);
        response->set_heartbeat_interval_ms(
            static_cast<int32_t>(absl::ToInt64Milliseconds(r.heartbeat_interval)));
        response->set_heartbeat_timeout_ms(
            static_cast<int32_t>(absl::ToInt64Milliseconds(r.heartbeat_timeout)));
        if (on_worker_added_) on_worker_added_();
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* AdminService::Heartbeat(grpc::CallbackServerContext* context,
                                                  const v1::HeartbeatRequest* request,
                                                  v1::HeartbeatResponse* response) {
  return common::AnswerUnary(
      authorizer_, context, common::Privilege::kCluster, [&]() -> absl::Status {
        absl::StatusOr<bool> draining =
            router_->registry().Heartbeat(request->worker_id(), LoadFromProto(request->load()),
                                          absl::Now());
        if (draining.ok()) response->set_draining(*draining);
        return draining.status();
      });
}

grpc::ServerUnaryReactor* AdminService::UndrainWorker(grpc::CallbackServerContext* context,
                                                      const v1::UndrainWorkerRequest* request,
                                                      v1::WorkerStatus* response) {
  return common::AnswerUnary(
      authorizer_, context, common::Privilege::kAdmin, [&]() -> absl::Status {
        absl::StatusOr<WorkerSnapshot> w = router_->registry().Undrain(request->id());
        if (w.ok()) *response = StatusToProto(*w);
        if (w.ok() && on_worker_added_) on_worker_added_();  // routable again: poll it now
        return w.status();
      });
}

grpc::ServerUnaryReactor* AdminService::GetProfiles(grpc::CallbackServerContext* context,
                                                    const v1::GetProfilesRequest* request,
                                                    v1::GetProfilesResponse* response) {
  return common::AnswerUnary(
      authorizer_, context, common::Privilege::kAdmin, [&]() -> absl::Status {
        std::vector<WorkerSnapshot> workers;
        if (request->worker_id().empty()) {
          workers = router_->registry().List();
        } else {
          absl::StatusOr<WorkerSnapshot> w = router_->registry().Get(request->worker_id());
          if (!w.ok()) return w.status();
          workers.push_back(*std::move(w));
        }
        for (const WorkerSnapshot& w : workers) {
          v1::WorkerProfileEntry* e = response->add_workers();
          e->set_id(w.id);
          e->set_role(RoleToProto(w.role));
          e->set_address(w.address);
          *e->mutable_profile() = ProfileToProto(w.descriptor.profile);
        }
        return absl::OkStatus();
      });
}

}  // namespace mlaserve::router
