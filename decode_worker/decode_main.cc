// mlaserve-decode: the decode worker. WorkerApp (worker/worker_app.h) reads the flags and runs
// the process; this file plugs in what is the decode worker's own: the KV receiver and its data
// plane services (KvService, and KvNcclService where nccl can run), DecodeRunner and
// DecodeService, all on the one port.
#include <memory>
#include <optional>
#include <string>

#include "decode_worker/decode_runner.h"
#include "decode_worker/decode_service.h"
#include "kvtransfer/kv_service.h"
#include "kvtransfer/nccl/kv_nccl_service.h"
#include "kvtransfer/nccl/worker_transport.h"
#include "kernels/common/env_switch.h"
#include "kvtransfer/receiver.h"
#include "profiles/attention_path_policy.h"
#ifdef MLASERVE_HAVE_NCCL
#include "kvtransfer/nccl/cuda_page_io.h"
#include "kvtransfer/nccl/nccl_communicator.h"
#endif
#include "worker/worker_app.h"

namespace mlaserve::decode {
namespace {

namespace v1 = ::mlaserve::v1;

class DecodeRole final : public worker::Role {
 public:
  std::optional<worker::StartupError> Start(const worker::WorkerEnv& env) override {
    const worker::WorkerOptions& o = env.options;
    model::Engine& e = env.engine;
    // Under data attention the limit holds per rank (docs/parallel.md).
    max_running_requests_ = o.max_running_requests * e.data_ranks();
    // The GPU profile gives the local-prefill threshold unless the flag sets one; it is
    // reported to the router, which prefills prompts up to it on this worker (docs/profiles.md).
    local_prefill_threshold_ = o.local_prefill_threshold >= 0
                                   ? o.local_prefill_threshold
                                   : env.profile.profile.local_prefill_threshold;

    receiver_ = std::make_unique<kvtransfer::KvReceiver>(
        &e.kv_pool(), env.layout, kvtransfer::KvReceiverOptions{o.kv_no_progress_timeout});
    kv_service_ =
        std::make_unique<kvtransfer::KvServiceImpl>(receiver_.get(), &env.security.authorizer);
    // nccl next to tcp where this worker can (kvtransfer/nccl/worker_transport.h); the offer
    // goes into every KvSessionRef and the WorkerDescriptor.
    kv_offer_ = kvtransfer::nccl::DecodeOffer(o.kv_transport, env.gpu_pool, env.nccl_built);
#ifdef MLASERVE_HAVE_NCCL
    if (kv_offer_ == "nccl") {
      kvtransfer::nccl::KvNcclServiceOptions no;
      // Every wait on the sender, an enqueue that connects to it included, is bounded by the
      // no-progress deadline: a dead prefill worker's pages are back within it.
      const absl::Duration enqueue = o.kv_no_progress_timeout;
      no.comm_factory = kvtransfer::nccl::NcclCommunicatorFactory(o.device, enqueue);
      no.id_factory = kvtransfer::nccl::NewNcclCommId;
      no.page_io_factory = kvtransfer::nccl::CudaPageIoFactory(o.device);
      no.no_progress_timeout = o.kv_no_progress_timeout;
      no.authorizer = &env.security.authorizer;
      // Data-parallel attention: each session is received on its rank's GPU, into its pool.
      for (int r = 0; r < e.data_ranks() && e.data_ranks() > 1; ++r) {
        no.pool_devices.push_back({&e.rank_pool(r),
                                   kvtransfer::nccl::NcclCommunicatorFactory(o.device + r, enqueue),
                                   kvtransfer::nccl::CudaPageIoFactory(o.device + r)});
      }
      nccl_service_ = std::make_unique<kvtransfer::nccl::KvNcclServiceImpl>(
          receiver_.get(), &e.kv_pool(), std::move(no));
    }
#endif
    DecodeRunnerOptions ro;
    ro.scheduler.max_running = o.max_running_requests;
    ro.scheduler.max_batch_tokens = o.max_batch_tokens;
    ro.scheduler.chunk_size = o.chunk_size;
    ro.default_lease = o.kv_lease;
    ro.max_lease = o.max_kv_lease;
    ro.kv_transport = kv_offer_;
    // Steps that carry prompts choose their attention path from the GPU profile (dense models;
    // a DSA model's steps stay on kAuto, which routes its sparse attention itself).
    // MLASERVE_DECODE_POLICY=0 leaves every step on kAuto (for timing comparisons).
    if (!e.config().has_indexer && !kernels::EnvSwitchedOff("MLASERVE_DECODE_POLICY")) {
      auto policy = profiles::AttentionPathPolicy::Create(env.profile.profile, env.profile.source,
                                                          {false, 0});
      if (!policy.ok()) return worker::StartupError{"attention path policy", policy.status()};
      policy_ = *std::move(policy);
      ro.attention_policy = policy_.get();
    }
    ro.json_vocabulary = env.json_vocabulary;
    ro.prefix_cache = o.prefix_cache;
    runner_ = std::make_unique<DecodeRunner>(&e, receiver_.get(), ro, &env.metrics);
    service_ = std::make_unique<DecodeService>(runner_.get(), env.describe,
                                               &env.security.authorizer);
    return std::nullopt;
  }

  std::vector<grpc::Service*> Services() override {
    std::vector<grpc::Service*> services = {service_.get(), kv_service_.get()};
    if (nccl_service_ != nullptr) services.push_back(nccl_service_.get());
    return services;
  }

  // The KV endpoint is this server's advertised address, known once the port is bound
  // (Reserve answers UNAVAILABLE until then).
  void OnServing(const std::string& advertised) override {
    runner_->set_kv_endpoint(advertised);
    runner_->Start();
  }

  void Describe(v1::WorkerDescriptor& d) const override {
    DescribeCapabilities(d);
    d.set_kv_transport(kv_offer_);
    d.mutable_profile()->set_local_prefill_threshold(local_prefill_threshold_);
    const DecodeLoad l = runner_->load();
    auto* load = d.mutable_load();
    load->set_kv_pages_total(l.kv_pages_total);
    load->set_kv_pages_free(l.kv_pages_free);
    load->set_running_requests(l.running);
    load->set_pending_requests(l.pending);
    load->set_max_running_requests(max_running_requests_);
    for (const DecodeRankLoad& r : l.ranks) {
      v1::RankLoad* rank = load->add_ranks();
      rank->set_kv_pages_total(r.kv_pages_total);
      rank->set_kv_pages_free(r.kv_pages_free);
      rank->set_running_requests(r.running);
      rank->set_pending_requests(r.pending);
    }
  }

  void Drain(absl::Duration timeout) override { runner_->Drain(timeout); }
  void Stop() override { runner_->Stop(); }

 private:
  int max_running_requests_ = 0;
  int local_prefill_threshold_ = 0;
  std::string kv_offer_;
  std::unique_ptr<kvtransfer::KvReceiver> receiver_;
  std::unique_ptr<kvtransfer::KvServiceImpl> kv_service_;
  std::unique_ptr<kvtransfer::nccl::KvNcclServiceImpl> nccl_service_;
  std::unique_ptr<profiles::AttentionPathPolicy> policy_;  // read by runner_: declared before it
  std::unique_ptr<DecodeRunner> runner_;
  std::unique_ptr<DecodeService> service_;
};

}  // namespace
}  // namespace mlaserve::decode

int main(int argc, char** argv) {
  mlaserve::worker::WorkerApp app(
      mlaserve::worker::WorkerRoleKind::kDecode, "mlaserve-decode",
      "mlaserve-decode: continuous-batching decode over KV received from prefill");
  if (std::optional<int> exit = app.Init(argc, argv)) return *exit;
  mlaserve::decode::DecodeRole role;  // after `app`: destroyed first, while the engine lives
  return app.Run(role);
}
