// AdminService: mlaserve.v1.Admin (admin.proto) on the router: operators manage workers,
// workers register and heartbeat. Every method is a thin shell over WorkerRegistry.
#pragma once

#include <functional>

#include "common/call_auth.h"
#include "mlaserve/v1/admin.grpc.pb.h"
#include "router/router_context.h"

namespace mlaserve::router {

class AdminService final : public v1::Admin::CallbackService {
 public:
  // `on_worker_added` runs after AddWorker / RegisterWorker (the poller polls at once).
  // `authorizer`: RegisterWorker and Heartbeat need the cluster credential, every other
  // method an admin credential (null: open, for in-process tests).
  AdminService(RouterContext* router, std::function<void()> on_worker_added,
               const common::CallAuthorizer* authorizer = nullptr)
      : router_(router), on_worker_added_(std::move(on_worker_added)), authorizer_(authorizer) {}

  grpc::ServerUnaryReactor* ListWorkers(grpc::CallbackServerContext*, const v1::ListWorkersRequest*,
                                        v1::ListWorkersResponse*) override;
  grpc::ServerUnaryReactor* GetWorker(grpc::CallbackServerContext*, const v1::GetWorkerRequest*,
                                      v1::WorkerStatus*) override;
  grpc::ServerUnaryReactor* AddWorker(grpc::CallbackServerContext*, const v1::AddWorkerRequest*,
                                      v1::WorkerStatus*) override;
  grpc::ServerUnaryReactor* RemoveWorker(grpc::CallbackServerContext*,
                                         const v1::RemoveWorkerRequest*,
                                         v1::RemoveWorkerResponse*) override;
  grpc::ServerUnaryReactor* DrainWorker(grpc::CallbackServerContext*, const v1::DrainWorkerRequest*,
                                        v1::WorkerStatus*) override;
  grpc::ServerUnaryReactor* UndrainWorker(grpc::CallbackServerContext*,
                                          const v1::UndrainWorkerRequest*,
                                          v1::WorkerStatus*) override;
  grpc::ServerUnaryReactor* GetLoads(grpc::CallbackServerContext*, const v1::GetLoadsRequest*,
                                     v1::GetLoadsResponse*) override;
  grpc::ServerUnaryReactor* RegisterWorker(grpc::CallbackServerContext*,
                                           const v1::RegisterWorkerRequest*,
                                           v1::RegisterWorkerResponse*) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext*, const v1::HeartbeatRequest*,
                                      v1::HeartbeatResponse*) override;
  grpc::ServerUnaryReactor* GetProfiles(grpc::CallbackServerContext*, const v1::GetProfilesRequest*,
                                        v1::GetProfilesResponse*) override;

 private:
  RouterContext* const router_;
  std::function<void()> on_worker_added_;
  const common::CallAuthorizer* const authorizer_;
};

}  // namespace mlaserve::router
