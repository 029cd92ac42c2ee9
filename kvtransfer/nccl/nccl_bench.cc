// mlaserve-nccl-bench: KV transfer bandwidth of the nccl transport between GPU 0 (prefill) and
// GPU 1 (decode) for 1k..32k-token prompts at DeepSeek V3's size (61 layers, 64-token pages of
// 576 bf16 = 73,728 bytes per layer page, page ids scattered and different on both sides),
// as a fraction of raw NCCL send/recv bandwidth measured in the same run: raw sends the same
// bytes from contiguous buffers (no gather/scatter) both as the plan's messages (layers packed
// up to 16 MiB, header included) and as one message per layer; the fraction is against the
// faster of the two.
//   usage: mlaserve-nccl-bench [--quick] [--json FILE]
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
  double kv_ms = 0, raw_ms = 0, raw_layer_ms = 0;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main(int argc, char** argv) {
  bool quick = false;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) json = argv[++i];
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
    std::vector<double> kv, raw, raw_layer;
    const int64_t layer_bytes = int64_t{pages} * kPageBytes;
    absl::Status rx_error;
    std::thread receiver([&] {
      cudaSetDevice(1);
      for (int it = 0; it < iters + 1; ++it) {
        sync.arrive_and_wait();
        auto r = ReceivePlan(rx.comm.get(), rx.io.get(), *plan, dst, absl::Seconds(30));
        if (!r.ok()) rx_error = r.status();
        sync.arrive_and_wait();
        for (const TransferStep& st : plan->steps()) {
          (void)rx.comm->Recv(raw_dst, st.message_bytes());
        }
        if (auto s = rx.comm->WaitAll(absl::Seconds(30)); !s.ok()) rx_error = s;
        sync.arrive_and_wait();
        for (int l = 0; l < kLayers; ++l) (void)rx.comm->Recv(raw_dst, layer_bytes);
        if (auto s = rx.comm->WaitAll(absl::Seconds(30)); !s.ok()) rx_error = s;
        sync.arrive_and_wait();
      }
    });
    cudaSetDevice(0);
    absl::Status tx_error;
    for (int it = 0; it < iters + 1; ++it) {
      sync.arrive_and_wait();
      absl::Time t0 = absl::Now();
      PlanSender sender(tx.comm.get(), tx.io.get(), &*plan, src, absl::Seconds(30));
      absl::Status s = sender.Begin();
      for (int l = 0; s.ok() && l < kLayers; ++l) s = sender.SendLayer(l);
      if (s.ok()) s = sender.Finish().status();
      if (!s.ok()) tx_error = s;
      // The receiver's scatter of the last layer finishes after the sender's last byte left:
      // stop the clock when both are done.
      sync.arrive_and_wait();
      const double kv_ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
      t0 = absl::Now();
      for (const TransferStep& st : plan->steps()) {
        (void)tx.comm->Send(raw_src, st.message_bytes());
      }
      if (auto w = tx.comm->WaitAll(absl::Seconds(30)); !w.ok()) tx_error = w;
      sync.arrive_and_wait();
      const double raw_ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
      t0 = absl::Now();
      for (int l = 0; l < kLayers; ++l) (void)tx.comm->Send(raw_src, layer_bytes);
      if (auto w = tx.comm->WaitAll(absl::Seconds(30)); !w.ok()) tx_error = w;
      sync.arrive_and_wait();
      const double raw_layer_ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
      if (it > 0) {  // the first round is warm-up (connection setup, page ids upload)
        kv.push_back(kv_ms);
        raw.push_back(raw_ms);
        raw_layer.push_back(raw_layer_ms);
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
                    Median(kv), Median(raw), Median(raw_layer)});
  }
  std::printf("nccl %s, GPU0 -> GPU1, %d layers x 73,728-byte pages, median of %d\n",
              NcclVersionString().c_str(), kLayers, iters);
  std::printf("raw: the same bytes from contiguous buffers, as the plan's messages (msgs) and\n"
              "as one message per layer (per-layer); kv/raw is against the faster raw\n");
  std::printf("%7s %9s %5s %8s %8s %8s %10s %11s %7s\n", "tokens", "MB", "msgs", "kv_ms",
              "kv_GB/s", "raw_ms", "raw_GB/s", "per-layer", "kv/raw");
  std::string js = "[";
  for (const Row& r : rows) {
    const double best_raw_ms = std::min(r.raw_ms, r.raw_layer_ms);
    const double kv_bw = r.bytes / (r.kv_ms * 1e6), raw_bw = r.bytes / (best_raw_ms * 1e6);
    std::printf("%7d %9.1f %5d %8.3f %8.1f %8.3f %10.1f %8.3f ms %6.1f%%\n", r.tokens,
                r.bytes / 1e6, r.messages, r.kv_ms, kv_bw, r.raw_ms, raw_bw, r.raw_layer_ms,
                100.0 * kv_bw / raw_bw);
    js += absl::StrFormat(
        "%s{\"tokens\":%d,\"bytes\":%d,\"messages\":%d,\"kv_ms\":%.4f,\"raw_ms\":%.4f,"
        "\"raw_per_layer_ms\":%.4f,\"fraction\":%.4f}",
        js.size() > 1 ? "," : "", r.tokens, r.bytes, r.messages, r.kv_ms, r.raw_ms,
        r.raw_layer_ms, best_raw_ms / r.kv_ms);
  }
  js += "]\n";
  if (!json.empty()) std::ofstream(json) << js;
  return 0;
}

}  // namespace
}  // namespace mlaserve::kvtransfer::nccl

int main(int argc, char** argv) { return mlaserve::kvtransfer::nccl::Main(argc, argv); }
