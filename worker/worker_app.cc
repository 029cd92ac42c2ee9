#include "worker/worker_app.h"

#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "common/server.h"
#include "common/status.h"
#include "kernels/mha_prefill/api.h"
#include "kvtransfer/nccl/worker_transport.h"
#include "spdlog/spdlog.h"
#include "worker/worker_proto.h"
#include "worker/worker_registration.h"

namespace mlaserve::worker {
namespace {

namespace v1 = ::mlaserve::v1;

const char* RoleName(WorkerRoleKind kind) {
  return kind == WorkerRoleKind::kPrefill ? "prefill" : "decode";
}

// --backend auto: CUDA when this build and machine have it, else the CPU.
absl::StatusOr<std::unique_ptr<model::Engine>> CreateEngine(WorkerRoleKind kind,
                                                             const WorkerOptions& o) {
  model::EngineOptions eo;
  eo.model_dir = o.model_dir;
  eo.device = o.device;
  eo.num_kv_pages = o.num_kv_pages;
  eo.mem_fraction_static = o.mem_fraction_static;
  eo.max_batch_tokens = o.max_batch_tokens;
  // A decode step has one row per running request.
  if (kind == WorkerRoleKind::kDecode) eo.max_batch_seqs = o.max_running_requests;
  ASSIGN_OR_RETURN(eo.kv_cache_dtype, model::ParseKvCacheDtype(o.kv_cache_dtype));
  ASSIGN_OR_RETURN(eo.mha_provider, kernels::ParseMhaPrefillProvider(o.mha_provider));
  eo.parallel = o.parallel;  // ValidateWorkerOptions parsed the layout flags
  return model::CreateEngineForBackend(eo, o.backend, [](const absl::Status& why) {
    spdlog::warn("CUDA engine unavailable ({}); using the CPU backend", why.ToString());
  });
}

// The facts every worker reports (role-specific ones are added by Role::Describe).
v1::WorkerDescriptor DescribeWorker(WorkerRoleKind kind, const WorkerOptions& o,
                                    const model::Engine& e, const kvtransfer::KvLayout& layout,
                                    const profiles::ResolvedProfile& profile,
                                    const std::string& profile_json, const std::string& address) {
  WorkerFacts f;
  f.role = kind == WorkerRoleKind::kPrefill ? v1::WORKER_ROLE_PREFILL : v1::WORKER_ROLE_DECODE;
  f.address = address;
  f.model = MakeModelIdentity(e.config(), o.model_dir, layout.CompatHash());
  f.backend = kernels::BackendName(e.backend());
  f.device = o.device;
  f.gpus = o.parallel.size;
  f.parallel_layout = model::DescribeParallel(o.parallel);
  f.prefix_cache = o.prefix_cache;
  f.chunk_size = o.chunk_size;
  v1::WorkerDescriptor d = MakeWorkerDescriptor(f);
  d.mutable_profile()->set_gpu_name(profile.profile.device.name);
  d.mutable_profile()->set_source(profile.source);
  d.mutable_profile()->set_profile_json(profile_json);
  return d;
}

}  // namespace

WorkerApp::WorkerApp(WorkerRoleKind kind, std::string binary, std::string description)
    : kind_(kind), binary_(std::move(binary)), description_(std::move(description)) {}

int WorkerApp::Fail(const std::string& what, const absl::Status& status) const {
  std::fprintf(stderr, "%s: %s: %s\n", binary_.c_str(), what.c_str(), status.ToString().c_str());
  return 1;
}

std::optional<int> WorkerApp::Init(int argc, char** argv) {
  common::InstallTerminationHandlers();
  CLI::App app{description_};
  AddWorkerFlags(app, kind_, &options_);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (absl::Status s = ValidateWorkerOptions(kind_, &options_); !s.ok()) {
    return Fail("invalid flags", s);
  }
  ConfigureWorkerLogging(options_.log_level);
  return std::nullopt;
}

std::optional<StartupError> WorkerApp::Build() {
  const WorkerOptions& o = options_;
  auto security =
      common::MakeClusterSecurity(o.security, binary_, common::ClientCertPolicy::kRequireAndVerify);
  if (!security.ok()) return StartupError{"invalid flags", security.status()};
  security_ = *std::move(security);

  auto engine = CreateEngine(kind_, o);
  if (!engine.ok()) return StartupError{"loading the model", engine.status()};
  engine_ = *std::move(engine);
  model::Engine& e = *engine_;
  std::string sized;  // how the count came about, where the flag left it to the worker
  if (o.num_kv_pages == 0) {
    sized = e.backend() == kernels::Backend::kCuda
                ? fmt::format(", sized by --mem-fraction-static {}", o.mem_fraction_static)
                : " (the CPU backend's default)";
  }
  const int pages = e.kv_pool().total_pages();
  spdlog::info("KV pool: {} pages of 64 tokens ({:.2f} GiB{}){}", pages,
               static_cast<double>(model::KvPool::PageBytes(e.kv_pool().options())) * pages / (1 << 30),
               o.parallel.size > 1 ? " on each GPU" : "", sized);
  spdlog::info("{}", kernels::DescribeMhaPrefillProvider(
                         kernels::ParseMhaPrefillProvider(o.mha_provider).value(), e.backend()));
  auto layout = kvtransfer::MakeKvLayout(e.config(), e.kv_pool().options());
  if (!layout.ok()) return StartupError{"KV layout", layout.status()};
  layout_ = *std::move(layout);
  // The GPU profile (docs/profiles.md), reported to the router. Profiles are keyed by the
  // attention shape one GPU runs: heads per rank (docs/parallel.md).
  model::ModelConfig per_rank = e.config();
  if (o.parallel.size > 1 && o.parallel.attention == model::AttentionParallel::kTensor) {
    per_rank.num_attention_heads /= o.parallel.size;
  }
  auto profile = profiles::ResolveWorkerProfile(
      o.profiles_dir, e.backend() == kernels::Backend::kCuda, o.device, per_rank);
  if (!profile.ok()) return StartupError{"GPU profile", profile.status()};
  profile_ = *std::move(profile);
  profile_json_ = profiles::ProfileToJson(profile_->profile);
  // JSON mode's vocabulary: built by the first request that asks for it.
  json_vocabulary_ = JsonModeVocabulary::FromModelDirectory(o.model_dir, e.config().vocab_size,
                                                            e.config().eos_token_ids);

  // Every rank's pool together; under data attention each rank's too (docs/parallel.md).
  auto* pages_total = metrics_.GetGauge("mlaserve_kv_pages_total", "KV pages in the pool.");
  auto* pages_used = metrics_.GetGauge("mlaserve_kv_pages_used", "KV pages in use.");
  auto* pages_cached = metrics_.GetGauge(
      "mlaserve_kv_pages_cached",
      "KV pages holding a cached prompt prefix (prefix cache), in use or free.");
  std::vector<std::pair<common::Gauge*, common::Gauge*>> rank_gauges;
  for (int r = 0; r < e.data_ranks() && e.data_ranks() > 1; ++r) {
    const common::MetricLabels rank = {{"rank", std::to_string(r)}};
    rank_gauges.emplace_back(
        metrics_.GetGauge("mlaserve_rank_kv_pages_total",
                          "KV pages in each data-parallel rank's pool.", rank),
        metrics_.GetGauge("mlaserve_rank_kv_pages_used",
                          "KV pages in use in each data-parallel rank's pool.", rank));
  }
  metrics_.AddCollectHook([&e, pages_total, pages_used, pages_cached, rank_gauges] {
    int total = 0, used = 0, cached = 0;
    for (int r = 0; r < e.data_ranks(); ++r) {
      const model::KvPool& pool = e.rank_pool(r);
      total += pool.total_pages();
      used += pool.total_pages() - pool.free_pages();
      cached += pool.cached_pages();
      if (r < static_cast<int>(rank_gauges.size())) {
        rank_gauges[r].first->Set(pool.total_pages());
        rank_gauges[r].second->Set(pool.total_pages() - pool.free_pages());
      }
    }
    pages_total->Set(total);
    pages_used->Set(used);
    pages_cached->Set(cached);
  });
  return std::nullopt;
}

int WorkerApp::Run(Role& role) {
  if (std::optional<StartupError> error = Build()) return Fail(error->what, error->status);
  const WorkerOptions& o = options_;
  const char* role_name = RoleName(kind_);
  model::Engine& e = *engine_;

  // nccl moves KV between GPU pools: a decode worker's ranks receive on their GPUs (rank pools
  // under data attention, rank 0's then every replica under tensor attention); a prefill
  // worker sends from rank 0's (replicated) pool under tensor attention, from each prompt's
  // rank's pool on that rank's GPU under data attention.
  const bool gpu_pool = e.backend() == kernels::Backend::kCuda;
#ifdef MLASERVE_HAVE_NCCL
  const bool nccl_built = true;
#else
  const bool nccl_built = false;
#endif
  if (absl::Status s = kvtransfer::nccl::CheckNcclFlag(o.kv_transport, gpu_pool, nccl_built);
      !s.ok()) {
    return Fail("flags", s);
  }

  auto describe = [this, &role] {
    v1::WorkerDescriptor d = DescribeWorker(kind_, options_, *engine_, *layout_, *profile_,
                                            profile_json_, advertise_.get());
    role.Describe(d);
    return d;
  };
  const WorkerEnv env{.options = o,
                      .engine = e,
                      .layout = *layout_,
                      .profile = *profile_,
                      .metrics = metrics_,
                      .security = *security_,
                      .gpu_pool = gpu_pool,
                      .nccl_built = nccl_built,
                      .describe = describe,
                      .json_vocabulary = json_vocabulary_.get()};
  if (std::optional<StartupError> error = role.Start(env)) return Fail(error->what, error->status);

  // The role's Drain waits for admitted requests; after it, open calls get a short grace.
  common::ServerRunner server({.listen = o.listen,
                               .drain_timeout = absl::Seconds(10),
                               .shutdown_grace = absl::Milliseconds(200),
                               .credentials = security_->server_credentials});
  for (grpc::Service* service : role.Services()) server.AddService(service);
  if (absl::Status s = server.Start(); !s.ok()) return Fail("starting the server", s);
  advertise_.set(o.advertise.empty() ? server.bound_address() : o.advertise);
  role.OnServing(advertise_.get());

  std::unique_ptr<common::MetricsHttpServer> metrics_http;
  if (o.metrics_port >= 0) {
    auto host = common::ParseHostPort(o.listen);  // validated with the flags
    auto m = common::MetricsHttpServer::Start(&metrics_, host->host, o.metrics_port,
                                              o.metrics_tls);
    if (!m.ok()) return Fail("metrics endpoint", m.status());
    metrics_http = std::move(*m);
    spdlog::info("metrics on {}", metrics_http->url());
  }
  std::unique_ptr<RouterRegistration> registration;
  if (!o.router.empty()) {
    registration = std::make_unique<RouterRegistration>(
        RouterRegistration::Options{.router_address = o.router, .dialer = security_->dialer},
        describe, [&] { return describe().load(); });
    registration->Start();
  }
  spdlog::info("{} worker for {} ({} layers, KV {}), {} pages{}, advertised as {}", role_name,
               o.model_dir, e.config().num_hidden_layers, layout_->Describe(),
               e.kv_pool().total_pages(),
               e.data_ranks() > 1 ? absl::StrCat(" on each of ", e.data_ranks(),
                                                 " data-parallel ranks")
                                  : "",
               advertise_.get());
  server.PrintListening();
  server.WaitForShutdown([&] {
    registration.reset();  // stop heartbeats first: the router stops routing here
    role.Drain(absl::Seconds(9));  // within the server's drain deadline
    role.Stop();
  });
  spdlog::info("{} worker stopped", role_name);
  return 0;
}

}  // namespace mlaserve::worker
