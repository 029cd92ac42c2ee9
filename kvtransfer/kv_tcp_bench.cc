// mlaserve-kv-tcp-bench: KV pages per second through the tcp transport on loopback, the way
// a prefill worker ships them, in one process (sender, gRPC KvService, receiver).
//
// Requests of --tokens tokens (pages of 64 tokens, --latent-dim elements of bf16 per token:
// 576 is DeepSeek-V2-Lite's 73,728-byte layer page) over --layers layers are prefilled
// --batch at a time; for every layer of a batch the "prefill loop" ships the batch's pages,
// then completes each request, without waiting for the transfers of earlier batches (the
// decode pool holds --inflight batches). Two ways of shipping:
//   page:  what the workers did before KV protocol 2: per page a synchronous KvPool::ReadPage
//          into a string and SendPage (one gRPC message per page, one connection), and a
//          receiver that waits for each page's write before reading the next;
//   batch: KvShipper: one KvPool::ReadPagesAsync per layer into page-locked staging and a
//          shipping thread sending each request's run of pages as one message.
// Reports pages/s and GB/s from the first send to the last receiver verdict, the process CPU
// time spent meanwhile (both sides: on a shared machine a steadier measure than wall time),
// and how long the prefill loop itself was busy shipping (what a forward would wait). The
// first request's received pages are checked byte for byte against the sent ones. --repeat
// runs the modes alternately and reports each run and the median.
//   usage: mlaserve-kv-tcp-bench [--mode page|batch|both] [--requests N] [--batch B]
//          [--tokens T] [--layers L] [--latent-dim D] [--inflight K] [--backend cpu|cuda]
//          [--connections C] [--ship-threads S] [--repeat R] [--json FILE]
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <atomic>
#include <cstring>
#include <functional>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/server.h"
#include "kvtransfer/kv_shipper.h"
#include "kvtransfer/tcp_transport.h"
#include "spdlog/spdlog.h"

namespace mlaserve::kvtransfer {
namespace {

struct BenchOptions {
  std::string mode = "both";
  int requests = 64;
  int batch = 8;
  int tokens = 1024;
  int layers = 27;
  int latent_dim = 576;
  int inflight = 4;
  kernels::Backend backend = kernels::Backend::kCpu;
  int connections = TcpKvTransport::kDefaultConnectionsPerEndpoint;
  int ship_threads = KvShipperOptions{}.num_threads;
  int repeat = 1;
  std::string json;
};

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct Result {
  std::string mode;
  int64_t pages = 0;
  int64_t bytes = 0;
  double seconds = 0;
  double producer_seconds = 0;
  double cpu_seconds = 0;
  int failed = 0;
  bool verified = false;
};

// The decode side: sessions, their verdicts, and the decode pool's free pages.
class Sink {
 public:
  explicit Sink(model::KvPool* pool) : pool_(pool) {}
  KvReceiver::DoneFn Done(std::function<void(const KvReceivedKv&)> check) {
    {
      absl::MutexLock lock(&mu_);
      ++pending_;
    }
    return [this, check](absl::StatusOr<KvReceivedKv> r) {
      if (r.ok()) {
        if (check) check(*r);
        pool_->Free(r->pages);
      } else {
        spdlog::error("KV session failed: {}", r.status().ToString());
      }
      absl::MutexLock lock(&mu_);
      --pending_;
      if (!r.ok()) ++failed_;
    };
  }
  // Waits (bounded) until at most `pending` sessions are open.
  bool WaitPending(int pending) {
    absl::MutexLock lock(&mu_);
    auto ok = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pending_ <= pending; };
    return mu_.AwaitWithTimeout(absl::Condition(&ok), absl::Seconds(120));
  }
  int failed() const {
    absl::MutexLock lock(&mu_);
    return failed_;
  }

 private:
  model::KvPool* const pool_;
  mutable absl::Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  int failed_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::StatusOr<Result> RunMode(const BenchOptions& o, const std::string& mode) {
  const int pages_per_request = kernels::PagesFor(o.tokens);
  model::KvPoolOptions po;
  po.backend = o.backend;
  po.dtype = kernels::DType::kBF16;
  po.num_layers = o.layers;
  po.latent_dim = o.latent_dim;
  po.num_pages = o.batch * pages_per_request;
  auto src = model::KvPool::Create(po);
  if (!src.ok()) return src.status();
  po.num_pages = o.batch * pages_per_request * o.inflight;
  auto dst = model::KvPool::Create(po);
  if (!dst.ok()) return dst.status();
  KvLayout layout;
  layout.model_type = "deepseek_v2";
  layout.num_layers = o.layers;
  layout.latent_dim = o.latent_dim;
  layout.dtype = kernels::DType::kBF16;

  // Random source pages (a batch reuses the same source pages, as a prefill pool would).
  const size_t page_bytes = (*src)->layer_page_bytes();
  const std::vector<int32_t> src_pages = *(*src)->Allocate(po.num_pages / o.inflight);
  std::vector<uint8_t> fill(src_pages.size() * page_bytes);
  std::mt19937_64 rng(1);
  for (size_t i = 0; i + 8 <= fill.size(); i += 8) {
    const uint64_t w = rng();
    std::memcpy(fill.data() + i, &w, 8);
  }
  for (int l = 0; l < o.layers; ++l) {
    if (auto s = (*src)->WritePages(l, src_pages, fill.data()); !s.ok()) return s;
  }

  KvReceiver receiver(dst->get(), layout,
                      {.wait_each_write = mode == "page"});
  KvServiceImpl service(&receiver);
  common::ServerOptions so;
  so.listen = "127.0.0.1:0";
  common::ServerRunner server(so);
  server.AddService(&service);
  if (auto s = server.Start(); !s.ok()) return s;
  TcpKvTransport transport(common::ClusterDialer::Insecure(), mode == "page" ? 1 : o.connections);
  Sink sink(dst->get());
  KvShipper shipper(src->get(), nullptr, {.num_threads = o.ship_threads});

  // The first request's pages, as the decode pool received them, against the source.
  std::atomic<bool> verified{false};
  auto check_first = [&](const KvReceivedKv& kv) {
    std::vector<uint8_t> got(pages_per_request * page_bytes), want(got.size());
    bool same = true;
    for (int l = 0; l < o.layers && same; ++l) {
      same = (*dst)->ReadPages(l, std::span(kv.pages).first(pages_per_request), got.data()).ok() &&
             (*src)->ReadPages(l, std::span(src_pages).first(pages_per_request), want.data()).ok() &&
             got == want;
    }
    verified = same;
  };

  Result res;
  res.mode = mode;
  const absl::Time start = absl::Now();
  const double cpu_start = ProcessCpuSeconds();
  absl::Duration producer;
  for (int first = 0; first < o.requests; first += o.batch) {
    const int n = std::min(o.batch, o.requests - first);
    if (!sink.WaitPending((o.inflight - 1) * o.batch)) {
      return absl::DeadlineExceededError("the decode side stopped taking sessions");
    }
    std::vector<std::shared_ptr<KvSender>> senders;
    for (int i = 0; i < n; ++i) {
      const std::string id = absl::StrFormat("%s-%d", mode, first + i);
      auto pages = (*dst)->Allocate(pages_per_request);
      if (!pages.ok()) return pages.status();
      auto s = receiver.CreateSession(id, std::move(*pages), pages_per_request,
                                      absl::Now() + absl::Seconds(60),
                                      sink.Done(first + i == 0 ? std::function<void(const KvReceivedKv&)>(check_first) : nullptr));
      if (!s.ok()) return s;
      auto sender = transport.Open(
          {id, server.bound_address(), "tcp", pages_per_request, layout.CompatHash()}, layout, {});
      if (!sender.ok()) return sender.status();
      senders.push_back(std::move(*sender));
    }
    const absl::Time busy = absl::Now();
    for (int l = 0; l < o.layers; ++l) {
      if (mode == "page") {
        for (int i = 0; i < n; ++i) {
          for (int p = 0; p < pages_per_request; ++p) {
            std::string bytes(page_bytes, '\0');
            absl::Status s = (*src)->ReadPage(l, src_pages[i * pages_per_request + p], bytes.data());
            if (s.ok()) s = senders[i]->SendPage(l, p, std::move(bytes));
            if (!s.ok()) return s;
          }
        }
      } else {
        std::vector<KvShipRun> runs;
        for (int i = 0; i < n; ++i) {
          runs.push_back({senders[i], 0,
                          std::vector<int32_t>(src_pages.begin() + i * pages_per_request,
                                               src_pages.begin() + (i + 1) * pages_per_request)});
        }
        if (auto s = shipper.ShipLayer(l, std::move(runs)); !s.ok()) return s;
      }
    }
    if (mode != "page") {
      if (auto s = shipper.WaitCopies(absl::Now() + absl::Seconds(60)); !s.ok()) return s;
    }
    for (int i = 0; i < n; ++i) {
      KvCompletion c{1, o.layers, pages_per_request, 0};
      auto done = [](absl::Status) {};
      if (mode == "page") {
        c.total_bytes = senders[i]->bytes_sent();
        senders[i]->Complete(c, done);
      } else {
        shipper.Complete(senders[i], c, done);
      }
    }
    producer += absl::Now() - busy;
  }
  if (!sink.WaitPending(0)) return absl::DeadlineExceededError("transfers did not finish");
  res.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  res.cpu_seconds = ProcessCpuSeconds() - cpu_start;
  res.producer_seconds = absl::ToDoubleSeconds(producer);
  res.pages = int64_t{o.requests} * o.layers * pages_per_request;
  res.bytes = res.pages * static_cast<int64_t>(page_bytes);
  res.failed = sink.failed();
  res.verified = verified;
  shipper.Stop();
  server.RequestShutdown();
  server.WaitForShutdown();
  return res;
}

int Main(int argc, char** argv) {
  BenchOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--mode") o.mode = next();
    else if (a == "--requests") o.requests = std::stoi(next());
    else if (a == "--batch") o.batch = std::stoi(next());
    else if (a == "--tokens") o.tokens = std::stoi(next());
    else if (a == "--layers") o.layers = std::stoi(next());
    else if (a == "--latent-dim") o.latent_dim = std::stoi(next());
    else if (a == "--inflight") o.inflight = std::stoi(next());
    else if (a == "--backend") o.backend = next() == "cuda" ? kernels::Backend::kCuda : kernels::Backend::kCpu;
    else if (a == "--connections") o.connections = std::stoi(next());
    else if (a == "--ship-threads") o.ship_threads = std::stoi(next());
    else if (a == "--repeat") o.repeat = std::stoi(next());
    else if (a == "--json") o.json = next();
    else {
      std::fprintf(stderr, "mlaserve-kv-tcp-bench: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (o.requests < 1 || o.batch < 1 || o.repeat < 1 || o.connections < 1 || o.ship_threads < 1 ||
      o.tokens < 1 || o.layers < 1 || o.inflight < 2 ||
      (o.mode != "page" && o.mode != "batch" && o.mode != "both")) {
    std::fprintf(stderr, "mlaserve-kv-tcp-bench: bad options (see the usage at the top of the source)\n");
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  std::vector<std::string> modes = o.mode == "both" ? std::vector<std::string>{"page", "batch"}
                                                    : std::vector<std::string>{o.mode};
  std::printf("%d requests x %d tokens, %d layers, latent %d bf16, batch %d, backend %s, "
              "%d connections, %d shipping threads\n",
              o.requests, o.tokens, o.layers, o.latent_dim, o.batch,
              kernels::BackendName(o.backend), o.connections, o.ship_threads);
  std::printf("%-7s %9s %9s %9s %8s %10s %8s %8s %s\n", "mode", "pages", "MB", "seconds", "GB/s",
              "pages/s", "cpu s/GB", "loop s", "check");
  std::string json = "[";
  int rc = 0;
  std::map<std::string, std::vector<Result>> all;
  auto row = [](const std::string& label, const Result& r, const std::string& check) {
    std::printf("%-7s %9lld %9.1f %9.3f %8.2f %10.0f %8.2f %8.3f %s\n", label.c_str(),
                static_cast<long long>(r.pages), r.bytes / 1e6, r.seconds,
                r.bytes / 1e9 / r.seconds, r.pages / r.seconds, r.cpu_seconds / (r.bytes / 1e9),
                r.producer_seconds, check.c_str());
  };
  for (int rep = 0; rep < o.repeat; ++rep) {
    for (const std::string& m : modes) {
      auto r = RunMode(o, m);
      if (!r.ok()) {
        std::fprintf(stderr, "%s: %s\n", m.c_str(), r.status().ToString().c_str());
        rc = 1;
        continue;
      }
      const bool good = r->failed == 0 && r->verified;
      if (!good) rc = 1;
      row(m, *r, good ? "ok" : absl::StrFormat("FAILED (%d sessions failed, first request %s)",
                                               r->failed, r->verified ? "intact" : "wrong"));
      all[m].push_back(*r);
      json += absl::StrFormat(
          "%s{\"mode\":\"%s\",\"pages\":%d,\"bytes\":%d,\"seconds\":%.4f,"
          "\"producer_seconds\":%.4f,\"cpu_seconds\":%.4f,\"gb_per_s\":%.3f,"
          "\"pages_per_s\":%.1f,\"ok\":%s}",
          json.size() > 1 ? "," : "", m, r->pages, r->bytes, r->seconds, r->producer_seconds,
          r->cpu_seconds, r->bytes / 1e9 / r->seconds, r->pages / r->seconds,
          good ? "true" : "false");
    }
  }
  if (o.repeat > 1) {  // the run of median wall time, per mode
    for (auto& [m, runs] : all) {
      std::sort(runs.begin(), runs.end(),
                [](const Result& a, const Result& b) { return a.seconds < b.seconds; });
      row("median", runs[runs.size() / 2], m);
    }
  }
  json += "]\n";
  if (!o.json.empty()) std::ofstream(o.json) << json;
  return rc;
}

}  // namespace
}  // namespace mlaserve::kvtransfer

int main(int argc, char** argv) { return mlaserve::kvtransfer::Main(argc, argv); }
