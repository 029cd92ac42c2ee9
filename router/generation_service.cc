#include "router/generation_service.h"

#include "common/call_auth.h"
#include "common/grpc_status.h"
#include "router/generate_call.h"

namespace mlaserve::router {

// The version reported by GetServerInfo and workers list.
inline constexpr char kRouterVersion[] = "0.1.0";

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  if (grpc::Status s = router_->public_authorizer().Check(*context, common::Privilege::kClient);
      !s.ok()) {
    return new common::RefusedWriteReactor<grpc::ByteBuffer>(s);
  }
  return new GenerateCall(router_, context, request);
}

grpc::ServerUnaryReactor* GenerationService::Abort(grpc::CallbackServerContext* context,
                                                   const v1::AbortRequest* request,
                                                   v1::AbortResponse* /*response*/) {
  if (auto* refused = common::RefuseUnlessAllowed(&router_->public_authorizer(), context,
                                                  common::Privilege::kClient)) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(common::ToGrpcStatus(router_->requests().Abort(request->request_id())));
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::GetModelInfo(grpc::CallbackServerContext* context,
                                                          const v1::GetModelInfoRequest*,
                                                          v1::GetModelInfoResponse* response) {
  if (auto* refused = common::RefuseUnlessAllowed(&router_->public_authorizer(), context,
                                                  common::Privilege::kClient)) {
    return refused;
  }
  const RouterModel& m = router_->model();
  response->set_model_name(m.identity.model_name);
  response->set_model_type(m.identity.model_type);
  response->set_vocab_size(m.limits.vocab_size);
  response->set_max_context_length(m.limits.max_context);
  for (int32_t id : m.limits.eos_token_ids) response->add_eos_token_ids(id);
  if (m.limits.bos_token_id.has_value()) response->set_bos_token_id(*m.limits.bos_token_id);
  response->set_num_hidden_layers(m.identity.num_hidden_layers);
  response->set_kv_lora_rank(m.identity.kv_lora_rank);
  response->set_qk_rope_head_dim(m.identity.qk_rope_head_dim);
  response->set_has_sparse_indexer(m.has_sparse_indexer);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::GetServerInfo(grpc::CallbackServerContext* context,
                                                           const v1::GetServerInfoRequest*,
                                                           v1::GetServerInfoResponse* response) {
  if (auto* refused = common::RefuseUnlessAllowed(&router_->public_authorizer(), context,
                                                  common::Privilege::kClient)) {
    return refused;
  }
  response->set_version(kRouterVersion);
  response->set_listen_address(router_->listen_address());
  response->set_start_time_unix_ms(absl::ToUnixMillis(router_->start_time()));
  response->set_active_requests(static_cast<int32_t>(router_->requests().size()));
  response->set_total_requests(router_->total_requests().load());
  for (const WorkerSnapshot& w : router_->registry().List()) {
    const bool healthy = w.state == WorkerState::kHealthy;
    if (w.role == WorkerRole::kPrefill) {
      response->set_prefill_workers_total(response->prefill_workers_total() + 1);
      response->set_prefill_workers_healthy(response->prefill_workers_healthy() + healthy);
    } else {
      response->set_decode_workers_total(response->decode_workers_total() + 1);
      response->set_decode_workers_healthy(response->decode_workers_healthy() + healthy);
    }
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace mlaserve::router
