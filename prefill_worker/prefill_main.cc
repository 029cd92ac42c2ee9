// mlaserve-prefill: the prefill worker. WorkerApp (worker/worker_app.h) reads the flags and runs
// the process; this file plugs in what is the prefill worker's own: the attention-path policy,
// the KV transport to decode workers, PrefillRunner and PrefillService.
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "kvtransfer/nccl/nccl_transport.h"
#include "kvtransfer/nccl/worker_transport.h"
#include "kvtransfer/tcp_transport.h"
#ifdef MLASERVE_HAVE_NCCL
#include "kvtransfer/nccl/cuda_page_io.h"
#include "kvtransfer/nccl/nccl_communicator.h"
#endif
#include "prefill_worker/prefill_runner.h"
#include "prefill_worker/prefill_service.h"
#include "profiles/attention_path_policy.h"
#include "worker/worker_app.h"

namespace mlaserve::prefill {
namespace {

namespace v1 = ::mlaserve::v1;

class PrefillRole final : public worker::Role {
 public:
  std::optional<worker::StartupError> Start(const worker::WorkerEnv& env) override {
    const worker::WorkerOptions& o = env.options;
    model::Engine& e = env.engine;
    engine_ = &e;
    PrefillRunnerOptions ro;
    ro.scheduler.max_batch_tokens = o.max_batch_tokens;
    ro.scheduler.chunk_size = o.chunk_size;
    ro.kv_no_progress_timeout = o.kv_no_progress_timeout;
    if (absl::Status s = ValidateSchedulerOptions(ro.scheduler); !s.ok()) {
      return worker::StartupError{"flags", s};
    }
    // Operator overrides of the profile's attention-path policy (--attention-path,
    // --se-threshold-scale, --split-fresh-prompts; validated with the flags).
    profiles::PolicyOptions policy_options;
    auto forced = profiles::ParsePrefillPath(o.attention_path);
    if (!forced.ok()) return worker::StartupError{"flags", forced.status()};
    policy_options.force = *forced;
    policy_options.threshold_scale = o.se_threshold_scale;
    policy_options.split_fresh_prompts = o.split_fresh_prompts;
    auto policy = profiles::AttentionPathPolicy::Create(
        env.profile.profile, env.profile.source, {e.config().has_indexer, e.config().index_topk},
        policy_options);
    if (!policy.ok()) return worker::StartupError{"attention path policy", policy.status()};
    policy_ = *std::move(policy);
    ro.attention_policy = policy_.get();
    ro.name = o.advertise.empty() ? std::string("prefill") : o.advertise;
    ro.kv_layerwise = o.kv_layerwise;
    ro.prefix_cache = o.prefix_cache;
    ro.json_vocabulary = env.json_vocabulary;

    // KV transport per decode worker: nccl where both ends can (worker_transport.h), else tcp.
    tcp_ = std::make_unique<kvtransfer::TcpKvTransport>(env.security.dialer);
#ifdef MLASERVE_HAVE_NCCL
    if (env.gpu_pool && o.kv_transport != "tcp") {
      kvtransfer::nccl::NcclTransportOptions to;
      // One communicator per prefill/decode pair: the id must be unique among prefill workers.
      to.pair_id = absl::StrCat(ro.name, "/", getpid(), "/", absl::ToUnixNanos(absl::Now()));
      // An enqueue that connects to the decode worker waits for it no longer than any other
      // step of a transfer (--kv-no-progress-ms).
      const absl::Duration enqueue = o.kv_no_progress_timeout;
      to.comm_factory = kvtransfer::nccl::NcclCommunicatorFactory(o.device, enqueue);
      to.page_io_factory = kvtransfer::nccl::CudaPageIoFactory(o.device);
      to.layer_fence = kvtransfer::nccl::CudaLayerFence(o.device, e.device_stream());
      // Data-parallel attention: each prompt is sent from its rank's pool on that rank's GPU
      // (--device + r). The engine hands each rank's layers over as that rank enqueues them,
      // so a layer's first gather waits for an event on that rank's stream.
      for (int r = 0; e.data_ranks() > 1 && r < e.data_ranks(); ++r) {
        to.rank_pools.push_back({&e.rank_pool(r),
                                 kvtransfer::nccl::NcclCommunicatorFactory(o.device + r, enqueue),
                                 kvtransfer::nccl::CudaPageIoFactory(o.device + r),
                                 kvtransfer::nccl::CudaLayerFence(o.device + r, e.rank_stream(r))});
      }
      to.dialer = env.security.dialer;
      nccl_ = std::make_unique<kvtransfer::nccl::NcclKvTransport>(&e.kv_pool(), std::move(to));
    }
#endif
    transport_ = std::make_unique<kvtransfer::nccl::SelectingKvTransport>(
        o.kv_transport, env.gpu_pool, tcp_.get(), nccl_.get());
    runner_ = std::make_unique<PrefillRunner>(&e, transport_.get(), env.layout, ro, &env.metrics);
    runner_->Start();
    service_ = std::make_unique<PrefillService>(runner_.get(), env.describe,
                                                &env.security.authorizer);
    return std::nullopt;
  }

  std::vector<grpc::Service*> Services() override { return {service_.get()}; }

  void Describe(v1::WorkerDescriptor& d) const override {
    d.set_kv_transport(nccl_ != nullptr ? "nccl" : "tcp");
    const PrefillLoad l = runner_->load();
    auto* load = d.mutable_load();
    int total = 0, free = 0;
    for (int r = 0; r < engine_->data_ranks(); ++r) {
      const model::KvPool& pool = engine_->rank_pool(r);
      total += pool.total_pages();
      free += pool.free_pages();
      if (engine_->data_ranks() == 1) continue;
      v1::RankLoad* rank = load->add_ranks();
      rank->set_kv_pages_total(pool.total_pages());
      rank->set_kv_pages_free(pool.free_pages());
      rank->set_running_requests(r < static_cast<int>(l.rank_prefilling.size())
                                     ? l.rank_prefilling[r]
                                     : 0);
    }
    load->set_kv_pages_total(total);
    load->set_kv_pages_free(free);
    load->set_running_requests(l.running_requests);
    load->set_pending_requests(l.pending_requests);
    load->set_pending_prefill_tokens(l.pending_prefill_tokens);
  }

  void Drain(absl::Duration timeout) override { runner_->Drain(timeout); }
  void Stop() override { runner_->Stop(); }

 private:
  model::Engine* engine_ = nullptr;
  std::unique_ptr<profiles::AttentionPathPolicy> policy_;
  std::unique_ptr<kvtransfer::TcpKvTransport> tcp_;
  std::unique_ptr<kvtransfer::nccl::NcclKvTransport> nccl_;
  std::unique_ptr<kvtransfer::nccl::SelectingKvTransport> transport_;
  std::unique_ptr<PrefillRunner> runner_;
  std::unique_ptr<PrefillService> service_;
};

}  // namespace
}  // namespace mlaserve::prefill

int main(int argc, char** argv) {
  mlaserve::worker::WorkerApp app(
      mlaserve::worker::WorkerRoleKind::kPrefill, "mlaserve-prefill",
      "mlaserve-prefill: chunked prefill that ships KV to decode workers");
  if (std::optional<int> exit = app.Init(argc, argv)) return *exit;
  mlaserve::prefill::PrefillRole role;  // after `app`: destroyed first, while the engine lives
  return app.Run(role);
}
