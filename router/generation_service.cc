#include "router/generation_service.h"

#include "common/call_auth.h"
#include "common/grpc_status.h"
#include "router/api_conversion.h"
#include "router/generate_call.h"

namespace mlaserve::router {
namespace {

// The gRPC end of a GenerateCall (generate_client.h): parses the raw request, writes the
// call's messages to the stream and forwards the reactor's events to the call. Self-owned
// (common/self_owned.h) until gRPC's OnDone, which is also the call's client's last event.
class GrpcGenerateReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                                  public GenerateClient,
                                  public common::SelfOwned<GrpcGenerateReactor> {
 public:
  static grpc::ServerWriteReactor<grpc::ByteBuffer>* Start(RouterContext* router,
                                                           grpc::CallbackServerContext* context,
                                                           const grpc::ByteBuffer* request) {
    auto reactor = common::MakeSelfOwned<GrpcGenerateReactor>();
    reactor->call_ = GenerateCall::Start(router, reactor.get(),
                                         absl::FromChrono(context->deadline()), Parse(request));
    return reactor.get();
  }

  void Send(const v1::GenerateResponse& message) override {
    bool own_buffer = false;
    buffer_.Clear();  // the writer needs an empty buffer; the previous write is done
    grpc::GenericSerialize<grpc::ProtoBufferWriter, v1::GenerateResponse>(message, &buffer_,
                                                                          &own_buffer);
    StartWrite(&buffer_);
  }
  void End(const absl::Status& status) override { Finish(common::ToGrpcStatus(status)); }

  void OnWriteDone(bool ok) override { call_->OnWriteDone(ok); }
  void OnCancel() override { call_->OnCancel(); }
  void OnDone() override {
    call_->OnDone();
    ReleaseSelf();
  }

 private:
  static absl::StatusOr<v1::GenerateRequest> Parse(const grpc::ByteBuffer* request) {
    std::vector<grpc::Slice> slices;
    std::string wire;
    if (request->Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices) {
        wire.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
    }
    v1::GenerateRequest parsed;
    if (!parsed.ParseFromString(wire)) return DiagnoseUnparsableGenerateRequest(wire);
    return parsed;
  }

  GenerateCall* call_ = nullptr;  // valid until its OnDone
  grpc::ByteBuffer buffer_;
};

}  // namespace

// The version reported by GetServerInfo and workers list.
inline constexpr char kRouterVersion[] = "0.1.0";

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  if (grpc::Status s = router_->public_authorizer().Check(*context, common::Privilege::kClient);
      !s.ok()) {
    return common::RefuseWrite<grpc::ByteBuffer>(s);
  }
  return GrpcGenerateReactor::Start(router_, context, request);
}

grpc::ServerUnaryReactor* GenerationService::Abort(grpc::CallbackServerContext* context,
                                                   const v1::AbortRequest* request,
                                                   v1::AbortResponse* /*response*/) {
  return common::AnswerUnary(&router_->public_authorizer(), context, common::Privilege::kClient,
                             [&] { return router_->requests().Abort(request->request_id()); });
}

grpc::ServerUnaryReactor* GenerationService::GetModelInfo(grpc::CallbackServerContext* context,
                                                          const v1::GetModelInfoRequest*,
                                                          v1::GetModelInfoResponse* response) {
  return common::AnswerUnary(
      &router_->public_authorizer(), context, common::Privilege::kClient, [&] {
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
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* GenerationService::GetServerInfo(grpc::CallbackServerContext* context,
                                                           const v1::GetServerInfoRequest*,
                                                           v1::GetServerInfoResponse* response) {
  return common::AnswerUnary(
      &router_->public_authorizer(), context, common::Privilege::kClient, [&] {
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
        return absl::OkStatus();
      });
}

}  // namespace mlaserve::router
