// mlaserve-decode: the decode worker. Flags (docs/serving.md) are read here only and turned into
// validated options; the KV data plane (KvService) is served on the same port as DecodeWorker.
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
#include "decode_worker/decode_runner.h"
#include "decode_worker/decode_service.h"
#include "kernels/mha_prefill/api.h"
#include "kvtransfer/layout.h"
#include "kvtransfer/receiver.h"
#include "kvtransfer/nccl/kv_nccl_service.h"
#include "kvtransfer/nccl/worker_transport.h"
#include "kvtransfer/tcp_transport.h"
#ifdef MLASERVE_HAVE_NCCL
#include "kvtransfer/nccl/cuda_page_io.h"
#include "kvtransfer/nccl/nccl_communicator.h"
#endif
#include "model/engine.h"
#include "profiles/gpu_profile.h"
#include "profiles/profile_store.h"
#include "spdlog/spdlog.h"

namespace mlaserve::decode {
namespace {

namespace v1 = ::mlaserve::v1;

int Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "mlaserve-decode: %s: %s\n", what.c_str(), status.ToString().c_str());
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
  ASSIGN_OR_RETURN(eo.mha_provider, kernels::ParseMhaPrefillProvider(o.mha_provider));
  eo.max_batch_seqs = o.max_running_requests;
  eo.parallel.size = o.tp_size;
  ASSIGN_OR_RETURN(eo.parallel.attention, model::ParseAttentionParallel(o.attention_parallel));
  ASSIGN_OR_RETURN(eo.parallel.moe, model::ParseMoeParallel(o.moe_parallel));
  return model::CreateEngineForBackend(eo, o.backend, [](const absl::Status& why) {
    spdlog::warn("CUDA engine unavailable ({}); using the CPU backend", why.ToString());
  });
}

int Main(int argc, char** argv) {
  common::InstallTerminationHandlers();
  CLI::App app{"mlaserve-decode: continuous-batching decode over KV received from prefill"};
  common::WorkerOptions o;
  common::AddWorkerFlags(app, common::WorkerRoleKind::kDecode, &o);
  CLI11_PARSE(app, argc, argv);
  if (absl::Status s = common::ValidateWorkerOptions(common::WorkerRoleKind::kDecode, &o);
      !s.ok()) {
    return Fail("invalid flags", s);
  }
  common::ConfigureWorkerLogging(o.log_level);
  absl::StatusOr<common::ClusterSecurity> security =
      common::MakeClusterSecurity(o.security, "mlaserve-decode",
                                  common::ClientCertPolicy::kRequireAndVerify);
  if (!security.ok()) return Fail("invalid flags", security.status());
  auto engine = CreateEngine(o);
  if (!engine.ok()) return Fail("loading the model", engine.status());
  spdlog::info("{}", kernels::DescribeMhaPrefillProvider(
                         kernels::ParseMhaPrefillProvider(o.mha_provider).value(), (*engine)->backend()));
  model::Engine& e = **engine;
  auto layout = kvtransfer::MakeKvLayout(e.config(), e.kv_pool().options());
  if (!layout.ok()) return Fail("KV layout", layout.status());
  // The GPU profile gives the local-prefill threshold unless the flag sets one; it is
  // reported to the router, which prefills prompts up to it on this worker (docs/profiles.md).
  // Profiles are keyed by the attention shape one GPU runs: heads per rank (docs/parallel.md).
  model::ModelConfig per_rank = e.config();
  if (o.tp_size > 1 && o.attention_parallel == "tensor") per_rank.num_attention_heads /= o.tp_size;
  auto profile = profiles::ResolveWorkerProfile(
      o.profiles_dir, e.backend() == kernels::Backend::kCuda, o.device, per_rank);
  if (!profile.ok()) return Fail("GPU profile", profile.status());
  const int local_prefill_threshold = o.local_prefill_threshold >= 0
                                          ? o.local_prefill_threshold
                                          : profile->profile.local_prefill_threshold;
  const std::string profile_json = profiles::ProfileToJson(profile->profile);

  common::MetricsRegistry metrics;
  auto* pages_total = metrics.GetGauge("mlaserve_kv_pages_total", "KV pages in the pool.");
  auto* pages_used = metrics.GetGauge("mlaserve_kv_pages_used", "KV pages in use.");
  metrics.AddCollectHook([&e, pages_total, pages_used] {
    pages_total->Set(e.kv_pool().total_pages());
    pages_used->Set(e.kv_pool().total_pages() - e.kv_pool().free_pages());
  });

  kvtransfer::KvReceiver receiver(&e.kv_pool(), *layout,
                                  kvtransfer::KvReceiverOptions{o.kv_no_progress_timeout});
  kvtransfer::KvServiceImpl kv_service(&receiver, &security->authorizer);
  // nccl next to tcp where this worker can (kvtransfer/nccl/worker_transport.h); the offer goes
  // into every KvSessionRef and the WorkerDescriptor.
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
  const std::string kv_offer = kvtransfer::nccl::DecodeOffer(o.kv_transport, gpu_pool, nccl_built);
  std::unique_ptr<kvtransfer::nccl::KvNcclServiceImpl> nccl_service;
#ifdef MLASERVE_HAVE_NCCL
  if (kv_offer == "nccl") {
    kvtransfer::nccl::KvNcclServiceOptions no;
    no.comm_factory = kvtransfer::nccl::NcclCommunicatorFactory(o.device);
    no.id_factory = kvtransfer::nccl::NewNcclCommId;
    no.page_io_factory = kvtransfer::nccl::CudaPageIoFactory(o.device);
    no.no_progress_timeout = o.kv_no_progress_timeout;
    no.authorizer = &security->authorizer;
    nccl_service = std::make_unique<kvtransfer::nccl::KvNcclServiceImpl>(&receiver, &e.kv_pool(),
                                                                         std::move(no));
  }
#endif

  // The runner's Drain waits for admitted requests; after it, open calls get a short grace.
  common::ServerRunner server({.listen = o.listen,
                               .drain_timeout = absl::Seconds(10),
                               .shutdown_grace = absl::Milliseconds(200),
                               .credentials = security->server_credentials});
  DecodeRunnerOptions ro;
  ro.scheduler.max_running = o.max_running_requests;
  ro.scheduler.max_batch_tokens = o.max_batch_tokens;
  ro.scheduler.chunk_size = o.chunk_size;
  ro.default_lease = o.kv_lease;
  ro.max_lease = o.max_kv_lease;
  ro.kv_transport = kv_offer;
  std::unique_ptr<DecodeRunner> runner;
  common::AdvertisedAddress advertise;  // set once the port is bound; read by GetInfo
  auto describe = [&] {
    common::WorkerFacts f;
    f.role = v1::WORKER_ROLE_DECODE;
    f.address = advertise.get();
    f.model = common::MakeModelIdentity(e.config(), o.model_dir, layout->CompatHash());
    f.backend = kernels::BackendName(e.backend());
    f.device = o.device;
    f.gpus = o.tp_size;
    f.parallel_layout = o.tp_size == 1 ? "tp=1"
                                       : absl::StrCat("tp=", o.tp_size, " attention=",
                                                      o.attention_parallel, " moe=", o.moe_parallel);
    f.kv_transport = kv_offer;
    f.chunk_size = o.chunk_size;
    f.local_prefill_threshold = local_prefill_threshold;
    v1::WorkerDescriptor d = common::MakeWorkerDescriptor(f);
    d.mutable_profile()->set_gpu_name(profile->profile.device.name);
    d.mutable_profile()->set_source(profile->source);
    d.mutable_profile()->set_profile_json(profile_json);
    const DecodeLoad l = runner->load();
    auto* load = d.mutable_load();
    load->set_kv_pages_total(l.kv_pages_total);
    load->set_kv_pages_free(l.kv_pages_free);
    load->set_running_requests(l.running);
    load->set_pending_requests(l.pending);
    load->set_max_running_requests(o.max_running_requests);
    return d;
  };
  auto listen = common::ParseHostPort(o.listen);
  runner = std::make_unique<DecodeRunner>(&e, &receiver, ro, &metrics);
  DecodeService service(runner.get(), describe, &security->authorizer);
  server.AddService(&service);
  server.AddService(&kv_service);
  if (nccl_service != nullptr) server.AddService(nccl_service.get());
  if (absl::Status s = server.Start(); !s.ok()) return Fail("starting the server", s);
  // The KV endpoint is this server's advertised address, known once the port is bound
  // (Reserve answers UNAVAILABLE until it is set, a few lines below).
  advertise.set(o.advertise.empty() ? server.bound_address() : o.advertise);
  runner->set_kv_endpoint(advertise.get());
  runner->Start();

  std::unique_ptr<common::MetricsHttpServer> metrics_http;
  if (o.metrics_port >= 0) {
    auto m = common::MetricsHttpServer::Start(&metrics, listen->host, o.metrics_port);
    if (!m.ok()) return Fail("metrics endpoint", m.status());
    metrics_http = std::move(*m);
    spdlog::info("metrics on http://{}/metrics",
                 common::FormatHostPort(listen->host, metrics_http->port()));
  }
  std::unique_ptr<common::RouterRegistration> registration;
  if (!o.router.empty()) {
    registration = std::make_unique<common::RouterRegistration>(
        common::RouterRegistration::Options{.router_address = o.router,
                                            .dialer = security->dialer}, describe,
        [&] { return describe().load(); });
    registration->Start();
  }
  spdlog::info("decode worker for {} ({} layers, KV {}), {} pages, advertised as {}",
               o.model_dir, e.config().num_hidden_layers, layout->Describe(),
               e.kv_pool().total_pages(), advertise.get());
  server.PrintListening();
  server.WaitForShutdown([&] {
    registration.reset();
    runner->Drain(absl::Seconds(9));
    runner->Stop();
  });
  spdlog::info("decode worker stopped");
  return 0;
}

}  // namespace
}  // namespace mlaserve::decode

int main(int argc, char** argv) { return mlaserve::decode::Main(argc, argv); }
