// mlaserve-prefill: the prefill worker. Flags (docs/serving.md) are read here only and turned
// into validated options; everything else lives in PrefillRunner / PrefillService.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "common/cluster_security.h"
#include "common/metrics.h"
#include "common/server.h"
#include "common/status.h"
#include "common/worker_options.h"
#include "common/worker_proto.h"
#include "common/worker_registration.h"
#include "kernels/mha_prefill/api.h"
#include "kvtransfer/layout.h"
#include "kvtransfer/nccl/nccl_transport.h"
#include "kvtransfer/nccl/worker_transport.h"
#include "kvtransfer/tcp_transport.h"
#ifdef MLASERVE_HAVE_NCCL
#include "kvtransfer/nccl/cuda_page_io.h"
#include "kvtransfer/nccl/nccl_communicator.h"
#endif
#include "model/engine.h"
#include "prefill_worker/prefill_runner.h"
#include "prefill_worker/prefill_service.h"
#include "profiles/attention_path_policy.h"
#include "profiles/profile_store.h"
#include "spdlog/spdlog.h"

namespace mlaserve::prefill {
namespace {

namespace v1 = ::mlaserve::v1;

int Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "mlaserve-prefill: %s: %s\n", what.c_str(), status.ToString().c_str());
  return 1;
}

// --backend auto: CUDA when this build and machine have it, else the CPU.
absl::StatusOr<std::unique_ptr<model::Engine>> CreateEngine(const common::WorkerOptions& o) {
  model::EngineOptions eo;
  eo.model_dir = o.model_dir;
  eo.device = o.device;
  eo.num_kv_pages = o.num_kv_pages;
  eo.max_batch_tokens = o.max_batch_tokens;
  ASSIGN_OR_RETURN(eo.kv_cache_dtype, model::ParseKvCacheDtype(o.kv_cache_dtype));
  eo.parallel.size = o.tp_size;
  ASSIGN_OR_RETURN(eo.parallel.attention, model::ParseAttentionParallel(o.attention_parallel));
  ASSIGN_OR_RETURN(eo.parallel.moe, model::ParseMoeParallel(o.moe_parallel));
  ASSIGN_OR_RETURN(eo.mha_provider, kernels::ParseMhaPrefillProvider(o.mha_provider));
  return model::CreateEngineForBackend(eo, o.backend, [](const absl::Status& why) {
    spdlog::warn("CUDA engine unavailable ({}); using the CPU backend", why.ToString());
  });
}

int Main(int argc, char** argv) {
  common::InstallTerminationHandlers();
  CLI::App app{"mlaserve-prefill: chunked prefill that ships KV to decode workers"};
  common::WorkerOptions o;
  common::AddWorkerFlags(app, common::WorkerRoleKind::kPrefill, &o);
  CLI11_PARSE(app, argc, argv);
  if (absl::Status s = common::ValidateWorkerOptions(common::WorkerRoleKind::kPrefill, &o);
      !s.ok()) {
    return Fail("invalid flags", s);
  }
  common::ConfigureWorkerLogging(o.log_level);
  absl::StatusOr<common::ClusterSecurity> security =
      common::MakeClusterSecurity(o.security, "mlaserve-prefill",
                                  common::ClientCertPolicy::kRequireAndVerify);
  if (!security.ok()) return Fail("invalid flags", security.status());

  PrefillRunnerOptions ro;
  ro.scheduler.max_batch_tokens = o.max_batch_tokens;
  ro.scheduler.chunk_size = o.chunk_size;
  ro.kv_no_progress_timeout = o.kv_no_progress_timeout;
  if (absl::Status s = ValidateSchedulerOptions(ro.scheduler); !s.ok()) return Fail("flags", s);

  auto engine = CreateEngine(o);
  if (!engine.ok()) return Fail("loading the model", engine.status());
  spdlog::info("{}", kernels::DescribeMhaPrefillProvider(
                         kernels::ParseMhaPrefillProvider(o.mha_provider).value(), (*engine)->backend()));
  model::Engine& e = **engine;
  auto layout = kvtransfer::MakeKvLayout(e.config(), e.kv_pool().options());
  if (!layout.ok()) return Fail("KV layout", layout.status());
  // The GPU profile: per-batch attention path (docs/profiles.md), reported to the router.
  // Profiles are keyed by the attention shape one GPU runs: heads per rank (docs/parallel.md).
  model::ModelConfig per_rank = e.config();
  if (o.tp_size > 1 && o.attention_parallel == "tensor") per_rank.num_attention_heads /= o.tp_size;
  auto profile = profiles::ResolveWorkerProfile(
      o.profiles_dir, e.backend() == kernels::Backend::kCuda, o.device, per_rank);
  if (!profile.ok()) return Fail("GPU profile", profile.status());
  // Operator overrides (--attention-path, --se-threshold-scale; validated with the flags).
  profiles::PolicyOptions policy_options;
  auto forced = profiles::ParsePrefillPath(o.attention_path);
  if (!forced.ok()) return Fail("flags", forced.status());
  policy_options.force = *forced;
  policy_options.threshold_scale = o.se_threshold_scale;
  auto policy = profiles::AttentionPathPolicy::Create(
      profile->profile, profile->source, {e.config().has_indexer, e.config().index_topk},
      policy_options);
  if (!policy.ok()) return Fail("attention path policy", policy.status());
  ro.attention_policy = policy->get();
  const std::string profile_json = profiles::ProfileToJson(profile->profile);

  common::MetricsRegistry metrics;
  auto* pages_total = metrics.GetGauge("mlaserve_kv_pages_total", "KV pages in the pool.");
  auto* pages_used = metrics.GetGauge("mlaserve_kv_pages_used", "KV pages in use.");
  metrics.AddCollectHook([&e, pages_total, pages_used] {
    pages_total->Set(e.kv_pool().total_pages());
    pages_used->Set(e.kv_pool().total_pages() - e.kv_pool().free_pages());
  });

  ro.name = o.advertise.empty() ? std::string("prefill") : o.advertise;
  ro.kv_layerwise = o.kv_layerwise;
  // KV transport per decode worker: nccl where both ends can (worker_transport.h), else tcp.
  // A multi-GPU worker's KV goes over tcp: the nccl transport moves one GPU's pool, and the
  // latent cache must reach every rank (docs/parallel.md).
  const bool gpu_pool = e.backend() == kernels::Backend::kCuda && o.tp_size == 1;
#ifdef MLASERVE_HAVE_NCCL
  const bool nccl_built = true;
#else
  const bool nccl_built = false;
#endif
  if (absl::Status s = kvtransfer::nccl::CheckNcclFlag(o.kv_transport, gpu_pool, nccl_built);
      !s.ok()) {
    return Fail("flags", s);
  }
  kvtransfer::TcpKvTransport tcp(security->dialer);
  std::unique_ptr<kvtransfer::nccl::NcclKvTransport> nccl;
#ifdef MLASERVE_HAVE_NCCL
  if (gpu_pool && o.kv_transport != "tcp") {
    kvtransfer::nccl::NcclTransportOptions to;
    // One communicator per prefill/decode pair: the id must be unique among prefill workers.
    to.pair_id = absl::StrCat(ro.name, "/", getpid(), "/", absl::ToUnixNanos(absl::Now()));
    to.comm_factory = kvtransfer::nccl::NcclCommunicatorFactory(o.device);
    to.page_io_factory = kvtransfer::nccl::CudaPageIoFactory(o.device);
    to.layer_fence = kvtransfer::nccl::CudaLayerFence(o.device, e.device_stream());
    to.dialer = security->dialer;
    nccl = std::make_unique<kvtransfer::nccl::NcclKvTransport>(&e.kv_pool(), std::move(to));
  }
#endif
  kvtransfer::nccl::SelectingKvTransport transport(o.kv_transport, gpu_pool, &tcp, nccl.get());
  PrefillRunner runner(&e, &transport, *layout, ro, &metrics);
  runner.Start();

  // The runner's Drain waits for admitted requests; after it, open calls get a short grace.
  common::ServerRunner server({.listen = o.listen,
                               .drain_timeout = absl::Seconds(10),
                               .shutdown_grace = absl::Milliseconds(200),
                               .credentials = security->server_credentials});
  common::AdvertisedAddress advertise;  // set once the port is bound; read by GetInfo
  auto describe = [&] {
    common::WorkerFacts f;
    f.role = v1::WORKER_ROLE_PREFILL;
    f.address = advertise.get();
    f.model = common::MakeModelIdentity(e.config(), o.model_dir, layout->CompatHash());
    f.backend = kernels::BackendName(e.backend());
    f.device = o.device;
    f.gpus = o.tp_size;
    f.parallel_layout = o.tp_size == 1 ? "tp=1"
                                       : absl::StrCat("tp=", o.tp_size, " attention=",
                                                      o.attention_parallel, " moe=", o.moe_parallel);
    f.kv_transport = nccl != nullptr ? "nccl" : "tcp";
    f.chunk_size = o.chunk_size;
    v1::WorkerDescriptor d = common::MakeWorkerDescriptor(f);
    d.mutable_profile()->set_gpu_name(profile->profile.device.name);
    d.mutable_profile()->set_source(profile->source);
    d.mutable_profile()->set_profile_json(profile_json);
    const PrefillLoad l = runner.load();
    auto* load = d.mutable_load();
    load->set_kv_pages_total(e.kv_pool().total_pages());
    load->set_kv_pages_free(e.kv_pool().free_pages());
    load->set_running_requests(l.running_requests);
    load->set_pending_requests(l.pending_requests);
    load->set_pending_prefill_tokens(l.pending_prefill_tokens);
    return d;
  };
  PrefillService service(&runner, describe, &security->authorizer);
  server.AddService(&service);
  if (absl::Status s = server.Start(); !s.ok()) return Fail("starting the server", s);
  advertise.set(o.advertise.empty() ? server.bound_address() : o.advertise);

  std::unique_ptr<common::MetricsHttpServer> metrics_http;
  if (o.metrics_port >= 0) {
    auto host = common::ParseHostPort(o.listen);
    auto m = common::MetricsHttpServer::Start(&metrics, host->host, o.metrics_port);
    if (!m.ok()) return Fail("metrics endpoint", m.status());
    metrics_http = std::move(*m);
    spdlog::info("metrics on http://{}/metrics",
                 common::FormatHostPort(host->host, metrics_http->port()));
  }
  std::unique_ptr<common::RouterRegistration> registration;
  if (!o.router.empty()) {
    registration = std::make_unique<common::RouterRegistration>(
        common::RouterRegistration::Options{.router_address = o.router,
                                            .dialer = security->dialer}, describe,
        [&] { return describe().load(); });
    registration->Start();
  }
  spdlog::info("prefill worker for {} ({} layers, KV {}), {} pages, advertised as {}",
               o.model_dir, e.config().num_hidden_layers, layout->Describe(),
               e.kv_pool().total_pages(), advertise.get());
  server.PrintListening();
  server.WaitForShutdown([&] {
    registration.reset();  // stop heartbeats first: the router stops routing here
    runner.Drain(absl::Seconds(9));  // within the server's drain deadline
    runner.Stop();
  });
  spdlog::info("prefill worker stopped");
  return 0;
}

}  // namespace
}  // namespace mlaserve::prefill

int main(int argc, char** argv) { return mlaserve::prefill::Main(argc, argv); }
