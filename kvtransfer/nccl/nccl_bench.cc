// mlaserve-nccl-bench: KV transfer bandwidth of the nccl transport between GPU 0 (prefill) and
// GPU 1 (decode) for 1k..32k-token prompts at DeepSeek V3's size (61 layers, 64-token pages of
// 576 bf16 = 73,728 bytes per layer page, page ids scattered and different on both sides),
// as a fraction of raw NCCL send/recv bandwidth measured in the same run: raw sends the same
// bytes from contiguous buffers (no gather/scatter) both as the plan's messages (layers packed
// up to 16 MiB, header included) and as one message per layer; the fraction is against the
// faster of the two.
// The transport runs with every layer already written (SendLayers over the whole prompt), with
// its page copies batched per message (kv: one gather and one scatter launch per message) and,
// for the A/B, with one gather / scatter per layer (kv_lc: the path before batching); both in
// the same rounds, alternating which goes first.
//   usage: mlaserve-nccl-bench [--quick] [--json FILE] [--copies both|per-message|per-layer]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <barrier>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kvtransfer/nccl/gpu_pair.h"

namespace mlaserve::kvtransfer::nccl {
namespace {

constexpr int kLayers = 61;
constexpr int64_t kPageBytes = 73728;

struct Row {
  int tokens = 0;
  int64_t bytes = 0;
  int messages = 0;
  // Medians in ms; < 0 where that way was not run (--copies).
  double kv_ms = -1, kv_layer_copies_ms = -1, raw_ms = 0, raw_layer_ms = 0;
};

double Median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One timed phase of a round: both threads start it together and finish it together.
enum class Phase { kKvPerMessage, kKvPerLayer, kRaw, kRawPerLayer };

// The phases of round `it`: the transport's ways first, alternating their order so neither
// always runs right after the raw sends of the round before.
std::vector<Phase> Phases(const std::vector<CopyBatching>& ways, int it) {
  std::vector<Phase> phases;
  for (CopyBatching b : ways) {
    phases.push_back(b == CopyBatching::kPerMessage ? Phase::kKvPerMessage : Phase::kKvPerLayer);
  }
  if (it % 2 == 1) std::reverse(phases.begin(), phases.end());
  phases.push_back(Phase::kRaw);
  phases.push_back(Phase::kRawPerLayer);
  return phases;
}

CopyBatching BatchingOf(Phase p) {
  return p == Phase::kKvPerLayer ? CopyBatching::kPerLayer : CopyBatching::kPerMessage;
}

// "%8.3f"-style cells, "-" for a way not run.
std::string Cell(double v, int width, int precision, const char* suffix = "") {
  if (v < 0) return absl::StrFormat("%*s", width + static_cast<int>(std::strlen(suffix)), "-");
  return absl::StrFormat("%*.*f%s", width, precision, v, suffix);
}

int Main(int argc, char** argv) {
  bool quick = false;
  std::string json;
  std::vector<CopyBatching> ways = {CopyBatching::kPerMessage, CopyBatching::kPerLayer};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json = argv[++i];
    } else if (std::strcmp(argv[i], "--copies") == 0 && i + 1 < argc) {
      const std::string v = argv[++i];
      if (v == "both") {
        ways = {CopyBatching::kPerMessage, CopyBatching::kPerLayer};
      } else if (v == "per-message") {
        ways = {CopyBatching::kPerMessage};
      } else if (v == "per-layer") {
        ways = {CopyBatching::kPerLayer};
      } else {
        std::fprintf(stderr,
                     "mlaserve-nccl-bench: --copies is '%s'; use both, per-message or "
                     "per-layer\n",
                     v.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "mlaserve-nccl-bench: unknown argument '%s'\n"
                   "usage: mlaserve-nccl-bench [--quick] [--json FILE] "
                   "[--copies both|per-message|per-layer]\n",
                   argv[i]);
      return 2;
    }
  }
  if (gpu_testing::DeviceCount() < 2) {
    std::fprintf(stderr, "mlaserve-nccl-bench: needs two GPUs, found %d\n",
                 gpu_testing::DeviceCount());
    return 2;
  }
  const int max_tokens = 32768;
  const int max_pages = max_tokens / 64;
  model::KvPoolOptions o;
  o.dtype = kernels::DType::kBF16;
  o.num_layers = kLayers;
  o.num_pages = max_pages + 64;
  o.latent_dim = 576;
  gpu_testing::Side tx, rx;
  const size_t slot_bytes = static_cast<size_t>(max_pages) * kPageBytes + sizeof(PlanHeader);
  if (auto s = gpu_testing::MakePair(o, 2, slot_bytes, &tx, &rx); !s.ok()) {
    std::fprintf(stderr, "setup: %s\n", s.ToString().c_str());
    return 1;
  }
  // Raw buffers: the largest message's worth, contiguous, on each GPU.
  void* raw_src = nullptr;
  void* raw_dst = nullptr;
  cudaSetDevice(0);
  cudaMalloc(&raw_src, slot_bytes);
  cudaSetDevice(1);
  cudaMalloc(&raw_dst, slot_bytes);

  std::mt19937 rng(7);
  const int iters = quick ? 3 : 7;
  std::vector<Row> rows;
  std::barrier sync(2);
  for (int tokens = 1024; tokens <= max_tokens; tokens *= 2) {
    const int pages = tokens / 64;
    auto src = gpu_testing::ShuffledPages(*tx.pool, pages, rng);
    auto dst = gpu_testing::ShuffledPages(*rx.pool, pages, rng);
    auto plan = TransferPlan::Make({absl::StrFormat("bench-%d", tokens), kLayers, pages,
                                    kPageBytes, max_pages});
    if (!plan.ok()) return 1;
    std::vector<double> kv, kv_layer_copies, raw, raw_layer;
    const int64_t layer_bytes = int64_t{pages} * kPageBytes;
    absl::Status rx_error;
    std::thread receiver([&] {
      cudaSetDevice(1);
      for (int it = 0; it < iters + 1; ++it) {
        for (Phase phase : Phases(ways, it)) {
          sync.arrive_and_wait();
          switch (phase) {
            case Phase::kKvPerMessage:
            case Phase::kKvPerLayer: {
              auto r = ReceivePlan(rx.comm.get(), rx.io.get(), *plan, dst, absl::Seconds(30),
                                   BatchingOf(phase));
              if (!r.ok()) rx_error = r.status();
              break;
            }
            case Phase::kRaw:
              for (const TransferStep& st : plan->steps()) {
                (void)rx.comm->Recv(raw_dst, st.message_bytes());
              }
              if (auto s = rx.comm->WaitAll(absl::Seconds(30)); !s.ok()) rx_error = s;
              break;
            case Phase::kRawPerLayer:
              for (int l = 0; l < kLayers; ++l) (void)rx.comm->Recv(raw_dst, layer_bytes);
              if (auto s = rx.comm->WaitAll(absl::Seconds(30)); !s.ok()) rx_error = s;
              break;
          }
          sync.arrive_and_wait();
        }
      }
    });
    cudaSetDevice(0);
    absl::Status tx_error;
    for (int it = 0; it < iters + 1; ++it) {
      for (Phase phase : Phases(ways, it)) {
        sync.arrive_and_wait();
        const absl::Time t0 = absl::Now();
        switch (phase) {
          case Phase::kKvPerMessage:
          case Phase::kKvPerLayer: {
            PlanSender sender(tx.comm.get(), tx.io.get(), &*plan, src, absl::Seconds(30),
                              BatchingOf(phase));
            absl::Status s = sender.Begin();
            if (s.ok()) s = sender.SendLayers(kLayers);  // the whole prompt is written
            if (s.ok()) s = sender.Finish().status();
            if (!s.ok()) tx_error = s;
            break;
          }
          case Phase::kRaw:
            for (const TransferStep& st : plan->steps()) {
              (void)tx.comm->Send(raw_src, st.message_bytes());
            }
            if (auto w = tx.comm->WaitAll(absl::Seconds(30)); !w.ok()) tx_error = w;
            break;
          case Phase::kRawPerLayer:
            for (int l = 0; l < kLayers; ++l) (void)tx.comm->Send(raw_src, layer_bytes);
            if (auto w = tx.comm->WaitAll(absl::Seconds(30)); !w.ok()) tx_error = w;
            break;
        }
        // The receiver's scatter of the last message finishes after the sender's last byte
        // left: stop the clock when both are done.
        sync.arrive_and_wait();
        const double ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
        if (it == 0) continue;  // the first round is warm-up (connection setup, page ids upload)
        switch (phase) {
          case Phase::kKvPerMessage: kv.push_back(ms); break;
          case Phase::kKvPerLayer: kv_layer_copies.push_back(ms); break;
          case Phase::kRaw: raw.push_back(ms); break;
          case Phase::kRawPerLayer: raw_layer.push_back(ms); break;
        }
      }
    }
    receiver.join();
    if (!tx_error.ok() || !rx_error.ok()) {
      std::fprintf(stderr, "tokens %d: send %s / receive %s\n", tokens,
                   tx_error.ToString().c_str(), rx_error.ToString().c_str());
      return 1;
    }
    tx.pool->Free(src);
    rx.pool->Free(dst);
    rows.push_back({tokens, plan->total_bytes(), static_cast<int>(plan->steps().size()),
                    Median(kv), Median(kv_layer_copies), Median(raw), Median(raw_layer)});
  }
  std::printf("nccl %s, GPU0 -> GPU1, %d layers x 73,728-byte pages, median of %d\n",
              NcclVersionString().c_str(), kLayers, iters);
  std::string ran;
  for (CopyBatching b : ways) ran += absl::StrCat(ran.empty() ? "" : ", ", CopyBatchingName(b));
  std::printf("copies: %s\n", ran.c_str());
  std::printf("kv: the transport, one gather/scatter launch per message; kv_lc: one per layer\n"
              "(the path before batching); raw: the same bytes from contiguous buffers, as the\n"
              "plan's messages (msgs) and as one message per layer (per-layer); kv/raw and\n"
              "lc/raw are against the faster raw\n");
  std::printf("%7s %9s %5s %8s %8s %8s %10s %11s %7s %9s %7s\n", "tokens", "MB", "msgs",
              "kv_ms", "kv_GB/s", "raw_ms", "raw_GB/s", "per-layer", "kv/raw", "kv_lc_ms",
              "lc/raw");
  // ms -> percent of the faster raw; -1 where that way was not run.
  auto fraction = [](double best_raw_ms, double ms) { return ms < 0 ? -1 : best_raw_ms / ms; };
  std::string js = "[";
  for (const Row& r : rows) {
    const double best_raw_ms = std::min(r.raw_ms, r.raw_layer_ms);
    const double raw_bw = r.bytes / (best_raw_ms * 1e6);
    const double kv_bw = r.kv_ms < 0 ? -1 : r.bytes / (r.kv_ms * 1e6);
    const double kv_fraction = fraction(best_raw_ms, r.kv_ms);
    const double lc_fraction = fraction(best_raw_ms, r.kv_layer_copies_ms);
    std::printf("%7d %9.1f %5d %s %s %8.3f %10.1f %8.3f ms %s %s %s\n", r.tokens, r.bytes / 1e6,
                r.messages, Cell(r.kv_ms, 8, 3).c_str(), Cell(kv_bw, 8, 1).c_str(), r.raw_ms,
                raw_bw, r.raw_layer_ms,
                Cell(kv_fraction < 0 ? -1 : 100 * kv_fraction, 6, 1, "%").c_str(),
                Cell(r.kv_layer_copies_ms, 9, 3).c_str(),
                Cell(lc_fraction < 0 ? -1 : 100 * lc_fraction, 6, 1, "%").c_str());
    // Ways not run are null.
    auto num = [](double v) { return v < 0 ? std::string("null") : absl::StrFormat("%.4f", v); };
    js += absl::StrFormat(
        "%s{\"tokens\":%d,\"bytes\":%d,\"messages\":%d,\"kv_ms\":%s,\"raw_ms\":%.4f,"
        "\"raw_per_layer_ms\":%.4f,\"fraction\":%s,\"kv_layer_copies_ms\":%s,"
        "\"fraction_layer_copies\":%s}",
        js.size() > 1 ? "," : "", r.tokens, r.bytes, r.messages, num(r.kv_ms), r.raw_ms,
        r.raw_layer_ms, num(kv_fraction), num(r.kv_layer_copies_ms), num(lc_fraction));
  }
  js += "]\n";
  if (!json.empty()) std::ofstream(json) << js;
  return 0;
}

}  // namespace
}  // namespace mlaserve::kvtransfer::nccl

int main(int argc, char** argv) { return mlaserve::kvtransfer::nccl::Main(argc, argv); }
