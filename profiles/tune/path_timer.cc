// PathTimer on CUDA: device buffers sized once, batch metadata uploaded before each timing,
// both paths launched through the kernels' public entry points (kernels/*/api.h).
#include "profiles/tune/path_timer.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/device_arch.h"
#include "kernels/gemm/api.h"
#include "kernels/kv_cache/api.h"
#include "kernels/kv_pack/api.h"
#include "kernels/merge_state/api.h"
#include "kernels/mha_prefill/api.h"
#include "kernels/mla_decode/api.h"
#include "kernels/mla_prefill/api.h"
#include "profiles/tune/cuda_buffers.h"
#include "profiles/tune/device_measure.h"

namespace mlaserve::profiles::tune {
namespace {

using kernels::DType;
constexpr int kPage = kernels::kPageSize;
// One prefix chunk of the MHA path: positions [start_b, start_b + len_b) of each sequence.
struct PrefixChunk {
  std::vector<int32_t> start, len, cu;  // cu: row offsets into the gathered rows
  int rows = 0, max_len = 0;
};

class CudaPathTimer final : public PathTimer {
 public:
  CudaPathTimer(int device, const AttentionShape& s, const TimerLimits& l)
      : device_(device), s_(s), l_(l) {}

  absl::Status Init() {
    RETURN_IF_ERROR(Cuda(cudaSetDevice(device_), "cudaSetDevice"));
    const int h = s_.heads, dn = s_.qk_nope_head_dim, dr = s_.qk_rope_head_dim;
    const int dv = s_.v_head_dim, r = s_.kv_lora_rank;
    lat_ = r + dr;
    const int64_t e = std::max<int64_t>(l_.max_sum_extend, 1);
    const int64_t chunk = std::max<int64_t>(l_.prefix_chunk_tokens, 1);
    const int64_t rows = std::max(e, chunk);
    max_pages_per_seq_ =
        static_cast<int>((l_.max_sum_prefix + l_.max_sum_extend + kPage - 1) / kPage) + 1;
    max_pages_per_seq_ = std::max(max_pages_per_seq_, l_.decode_context / kPage + 1);
    num_pages_ = std::max(max_pages_per_seq_ + l_.max_batch,
                          l_.decode_batch * (l_.decode_context / kPage + 1));
    RETURN_IF_ERROR(cache_.Allocate(size_t(num_pages_) * kPage * lat_ * kBf16, "latent cache"));
    RETURN_IF_ERROR(lat_ext_.Allocate(size_t(e) * lat_ * kBf16, "extend latent"));
    RETURN_IF_ERROR(lat_pre_.Allocate(size_t(chunk) * lat_ * kBf16, "prefix latent"));
    RETURN_IF_ERROR(w_kvb_.Allocate(size_t(h) * (dn + dv) * r * kBf16, "kv_b_proj"));
    RETURN_IF_ERROR(q_.Allocate(size_t(e) * h * (dn + dr) * kBf16, "q"));
    RETURN_IF_ERROR(kv_.Allocate(size_t(rows) * h * (dn + dv) * kBf16, "kv"));
    RETURN_IF_ERROR(k_.Allocate(size_t(rows) * h * (dn + dr) * kBf16, "k"));
    RETURN_IF_ERROR(v_.Allocate(size_t(rows) * h * dv * kBf16, "v"));
    RETURN_IF_ERROR(o_.Allocate(size_t(e) * h * dv * kBf16, "o"));
    RETURN_IF_ERROR(o_tmp_.Allocate(size_t(e) * h * dv * kBf16, "o_tmp"));
    RETURN_IF_ERROR(lse_.Allocate(size_t(e) * h * 4, "lse"));
    RETURN_IF_ERROR(lse_tmp_.Allocate(size_t(e) * h * 4, "lse_tmp"));
    RETURN_IF_ERROR(q_abs_.Allocate(size_t(e) * h * lat_ * kBf16, "q_abs"));
    RETURN_IF_ERROR(out_lat_.Allocate(size_t(e) * h * r * kBf16, "latent out"));
    const size_t meta = size_t(l_.max_batch + 1) * 4;
    for (DeviceBuffer* b : {&cu_q_, &seqlens_k_}) {
      RETURN_IF_ERROR(b->Allocate(meta, "metadata"));
    }
    RETURN_IF_ERROR(block_table_.Allocate(size_t(l_.max_batch) * max_pages_per_seq_ * 4, "pages"));
    // mha_prefill's work counter (kernels/mha_prefill/api.h: zero, left zero), as the engine's.
    RETURN_IF_ERROR(work_counter_.Allocate(sizeof(uint32_t), "mha work counter"));
    RETURN_IF_ERROR(Upload(work_counter_, std::vector<uint32_t>{0}));
    uint64_t seed = 1;
    for (DeviceBuffer* b : {&cache_, &lat_ext_, &w_kvb_, &q_}) RETURN_IF_ERROR(b->Random(seed++));
    return Cuda(cudaDeviceSynchronize(), "init");
  }

  absl::StatusOr<BatchTimes> Time(const std::vector<SequenceShape>& batch) override {
    RETURN_IF_ERROR(Prepare(batch));
    BatchTimes t;
    t.se = ComputeBatchStats(batch).se;
    ASSIGN_OR_RETURN(t.mha_ours_us, MedianUs([&] { return RunMha(kernels::MhaPrefillProvider::kOurs); },
                                             l_.warmup, l_.reps));
    if (time_cudnn_) {
      // As the engine runs a cell tuned on cuDNN (kPreferCudnn: cuDNN where it can run the
      // call). At least one untimed run: a new shape's first cuDNN call builds its plan.
      ASSIGN_OR_RETURN(t.mha_cudnn_us,
                       MedianUs([&] { return RunMha(kernels::MhaPrefillProvider::kPreferCudnn); },
                                std::max(l_.warmup, 1), l_.reps));
    }
    ASSIGN_OR_RETURN(t.mla_us, MedianUs([&] { return RunMla(); }, l_.warmup, l_.reps));
    return t;
  }

  std::vector<MhaPrefillProvider> mha_providers() const override {
    if (!time_cudnn_) return {MhaPrefillProvider::kOurs};
    return {MhaPrefillProvider::kOurs, MhaPrefillProvider::kCudnn};
  }
  std::string cudnn_note() const override { return cudnn_note_; }

  // Decides whether cuDNN is timed (limits.mha_providers): it must load, and run this shape's
  // two MHA calls (causal over the extend, non-causal over a prefix chunk) when forced.
  absl::Status ChooseProviders();

  absl::StatusOr<double> TimeDecodeStep(int batch, int context) override;
  absl::StatusOr<double> TimeDenseGemm(int m) override;
  absl::StatusOr<DeviceFacts> MeasureDevice() override;
  absl::StatusOr<DecodeSplit> PlanDecode(int batch, int context) override;

 private:
  absl::Status Prepare(const std::vector<SequenceShape>& batch);
  absl::Status RunMha(kernels::MhaPrefillProvider provider);
  absl::Status RunMla();
  kernels::GemmParams KvbGemm(const void* latent, int rows) const;
  kernels::KvPackParams Pack(const void* latent, int rows) const;
  kernels::MhaPrefillParams Attention(bool causal) const;

  const int device_;
  const AttentionShape s_;
  const TimerLimits l_;
  const kernels::KernelContext ctx_{kernels::Backend::kCuda, nullptr, 0};
  int lat_ = 0, num_pages_ = 0, max_pages_per_seq_ = 0;
  DeviceBuffer cache_, lat_ext_, lat_pre_, w_kvb_, q_, kv_, k_, v_, o_, o_tmp_, lse_, lse_tmp_;
  DeviceBuffer q_abs_, out_lat_, cu_q_, seqlens_k_, block_table_, work_counter_;
  // Per prefix chunk: start[batch], len[batch], cu[batch + 1], uploaded before timing.
  std::unique_ptr<DeviceBuffer> chunk_meta_;
  size_t ChunkMetaInts() const { return 3 * size_t(batch_) + 1; }
  // The current batch.
  int batch_ = 0, total_q_ = 0, max_q_ = 0, max_k_ = 0;
  std::vector<PrefixChunk> chunks_;
  bool time_cudnn_ = false;
  std::string cudnn_note_;
};

absl::Status CudaPathTimer::ChooseProviders() {
  time_cudnn_ = false;
  if (l_.mha_providers == kernels::MhaPrefillProvider::kOurs) {
    cudnn_note_ = "not timed (--mha-providers ours)";
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> version = kernels::MhaPrefillCudnnVersion();
  absl::Status probe = version.status();
  if (probe.ok()) {
    // One sequence with a cached prefix: both of the MHA path's attention calls, on cuDNN alone.
    const int64_t extend = std::min<int64_t>(l_.max_sum_extend, 128);
    probe = Prepare({SequenceShape{std::min<int64_t>(l_.max_sum_prefix, 256), extend}});
    if (probe.ok()) probe = RunMha(kernels::MhaPrefillProvider::kCudnn);
    if (probe.ok()) probe = Cuda(cudaDeviceSynchronize(), "cuDNN probe");
  }
  if (probe.ok()) {
    time_cudnn_ = true;
    cudnn_note_ = *version;
    return absl::OkStatus();
  }
  cudnn_note_ = absl::StrCat("not timed: ", probe.message());
  if (l_.mha_providers == kernels::MhaPrefillProvider::kCudnn) {
    return absl::FailedPreconditionError(
        absl::StrCat("--mha-providers asks for cuDNN, which cannot run here: ", probe.message()));
  }
  return absl::OkStatus();
}

absl::Status CudaPathTimer::Prepare(const std::vector<SequenceShape>& batch) {
  batch_ = static_cast<int>(batch.size());
  if (batch_ < 1 || batch_ > l_.max_batch) {
    return absl::InvalidArgumentError(absl::StrCat("batch size ", batch_, " is outside [1, ",
                                                    l_.max_batch, "]"));
  }
  std::vector<int32_t> cu_q{0}, seqlens, table(size_t(batch_) * max_pages_per_seq_, 0);
  std::vector<int32_t> pages(num_pages_);
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), std::mt19937(batch_ * 7919 + total_q_));
  int next_page = 0;
  max_q_ = max_k_ = 0;
  int64_t max_prefix = 0;
  for (int b = 0; b < batch_; ++b) {
    const SequenceShape& sq = batch[b];
    cu_q.push_back(cu_q.back() + static_cast<int32_t>(sq.extend));
    const int64_t len = sq.prefix + sq.extend;
    seqlens.push_back(static_cast<int32_t>(len));
    max_q_ = std::max<int>(max_q_, static_cast<int>(sq.extend));
    max_k_ = std::max<int>(max_k_, static_cast<int>(len));
    max_prefix = std::max(max_prefix, sq.prefix);
    for (int64_t p = 0; p < (len + kPage - 1) / kPage; ++p) {
      if (next_page >= num_pages_) return absl::InvalidArgumentError("batch exceeds the cache");
      table[size_t(b) * max_pages_per_seq_ + p] = pages[next_page++];
    }
  }
  total_q_ = cu_q.back();
  if (total_q_ > l_.max_sum_extend) {
    return absl::InvalidArgumentError(absl::StrCat("Σextend ", total_q_, " exceeds the limit ",
                                                   l_.max_sum_extend));
  }
  RETURN_IF_ERROR(Upload(cu_q_, cu_q));
  RETURN_IF_ERROR(Upload(seqlens_k_, seqlens));
  RETURN_IF_ERROR(Upload(block_table_, table));
  // Prefix chunks: each covers up to prefix_chunk_tokens / batch positions of every sequence.
  chunks_.clear();
  const int64_t per_seq = std::max<int64_t>(kPage, l_.prefix_chunk_tokens / batch_);
  for (int64_t begin = 0; begin < max_prefix; begin += per_seq) {
    PrefixChunk c;
    c.cu.push_back(0);
    for (const SequenceShape& sq : batch) {
      const int64_t n = std::clamp<int64_t>(sq.prefix - begin, 0, per_seq);
      c.start.push_back(static_cast<int32_t>(begin));
      c.len.push_back(static_cast<int32_t>(n));
      c.cu.push_back(c.cu.back() + static_cast<int32_t>(n));
      c.max_len = std::max<int>(c.max_len, static_cast<int>(n));
    }
    c.rows = c.cu.back();
    chunks_.push_back(std::move(c));
  }
  std::vector<int32_t> meta;
  for (const PrefixChunk& c : chunks_) {
    meta.insert(meta.end(), c.start.begin(), c.start.end());
    meta.insert(meta.end(), c.len.begin(), c.len.end());
    meta.insert(meta.end(), c.cu.begin(), c.cu.end());
  }
  if (meta.empty()) return absl::OkStatus();
  if (!chunk_meta_ || chunk_meta_->bytes() < meta.size() * 4) {
    chunk_meta_ = std::make_unique<DeviceBuffer>();
    RETURN_IF_ERROR(chunk_meta_->Allocate(meta.size() * 8, "chunk metadata"));
  }
  return Upload(*chunk_meta_, meta);
}

kernels::GemmParams CudaPathTimer::KvbGemm(const void* latent, int rows) const {
  kernels::GemmParams g;
  g.dtype = DType::kBF16;
  g.m = rows;
  g.n = s_.heads * (s_.qk_nope_head_dim + s_.v_head_dim);
  g.k = s_.kv_lora_rank;
  g.a = latent;
  g.lda = lat_;
  g.b = w_kvb_.get();
  g.ldb = s_.kv_lora_rank;
  g.b_transposed = true;
  g.c = kv_.get();
  g.ldc = g.n;
  return g;
}

kernels::KvPackParams CudaPathTimer::Pack(const void* latent, int rows) const {
  kernels::KvPackParams p;
  p.dtype = DType::kBF16;
  p.num_tokens = rows;
  p.num_heads = s_.heads;
  p.nope_dim = s_.qk_nope_head_dim;
  p.rope_dim = s_.qk_rope_head_dim;
  p.v_dim = s_.v_head_dim;
  p.kv = kv_.get();
  p.k_pe = static_cast<const char*>(latent) + size_t(s_.kv_lora_rank) * kBf16;
  p.k_pe_stride = lat_;
  p.k = k_.get();
  p.v = v_.get();
  return p;
}

kernels::MhaPrefillParams CudaPathTimer::Attention(bool causal) const {
  const int h = s_.heads, dqk = s_.qk_nope_head_dim + s_.qk_rope_head_dim, dv = s_.v_head_dim;
  kernels::MhaPrefillParams a;
  a.dtype = DType::kBF16;
  a.batch = batch_;
  a.num_heads = a.num_kv_heads = h;
  a.head_dim_qk = dqk;
  a.head_dim_v = dv;
  a.q = q_.get();
  a.q_token_stride = int64_t(h) * dqk;
  a.q_head_stride = dqk;
  a.k = k_.get();
  a.k_token_stride = int64_t(h) * dqk;
  a.k_head_stride = dqk;
  a.v = v_.get();
  a.v_token_stride = int64_t(h) * dv;
  a.v_head_stride = dv;
  a.out_token_stride = int64_t(h) * dv;
  a.out_head_stride = dv;
  a.cu_seqlens_q = cu_q_.get<int32_t>();
  a.max_seqlen_q = max_q_;
  a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(dqk));
  a.causal = causal;
  a.work_counter = work_counter_.get<uint32_t>();
  return a;
}

absl::Status CudaPathTimer::RunMha(kernels::MhaPrefillProvider provider) {
  RETURN_IF_ERROR(kernels::Gemm(KvbGemm(lat_ext_.get(), total_q_), ctx_));
  RETURN_IF_ERROR(kernels::KvPack(Pack(lat_ext_.get(), total_q_), ctx_));
  kernels::MhaPrefillParams a = Attention(/*causal=*/true);
  a.cu_seqlens_k = cu_q_.get<int32_t>();
  a.max_seqlen_k = max_q_;
  a.out = o_.get();
  a.lse = lse_.get<float>();
  a.provider = provider;
  RETURN_IF_ERROR(kernels::MhaPrefill(a, ctx_));
  for (size_t ci = 0; ci < chunks_.size(); ++ci) {
    const PrefixChunk& c = chunks_[ci];
    const int32_t* meta = chunk_meta_->get<int32_t>() + ci * ChunkMetaInts();
    kernels::CacheGatherParams g;
    g.dtype = DType::kBF16;
    g.batch = batch_;
    g.entry_dim = lat_;
    g.cache = cache_.get();
    g.num_pages = num_pages_;
    g.block_table = block_table_.get<int32_t>();
    g.max_pages_per_seq = max_pages_per_seq_;
    g.start = meta;
    g.len = meta + batch_;
    g.cu_dst = meta + 2 * batch_;
    g.dst = lat_pre_.get();
    RETURN_IF_ERROR(kernels::CacheGather(g, ctx_));
    RETURN_IF_ERROR(kernels::Gemm(KvbGemm(lat_pre_.get(), c.rows), ctx_));
    RETURN_IF_ERROR(kernels::KvPack(Pack(lat_pre_.get(), c.rows), ctx_));
    kernels::MhaPrefillParams pa = Attention(/*causal=*/false);
    pa.cu_seqlens_k = meta + 2 * batch_;
    pa.max_seqlen_k = c.max_len;
    pa.out = o_tmp_.get();
    pa.lse = lse_tmp_.get<float>();
    pa.provider = provider;
    RETURN_IF_ERROR(kernels::MhaPrefill(pa, ctx_));
    kernels::MergeStateParams m;
    m.dtype = DType::kBF16;
    m.num_tokens = total_q_;
    m.num_heads = s_.heads;
    m.head_dim = s_.v_head_dim;
    m.out_a = o_.get();
    m.out_b = o_tmp_.get();
    m.out = o_.get();
    m.token_stride = int64_t(s_.heads) * s_.v_head_dim;
    m.lse_a = lse_.get<float>();
    m.lse_b = lse_tmp_.get<float>();
    m.lse = lse_.get<float>();
    RETURN_IF_ERROR(kernels::MergeState(m, ctx_));
  }
  return absl::OkStatus();
}

absl::Status CudaPathTimer::RunMla() {
  const int h = s_.heads, dn = s_.qk_nope_head_dim, dr = s_.qk_rope_head_dim;
  const int dv = s_.v_head_dim, r = s_.kv_lora_rank;
  // q_abs[t, h, :r] = q_nope[t, h] . W_UK[h]  (W_UK[h] = rows [h*(dn+dv), +dn) of kv_b_proj)
  kernels::GemmParams uk;
  uk.dtype = DType::kBF16;
  uk.batch = h;
  uk.m = total_q_;
  uk.n = r;
  uk.k = dn;
  uk.a = q_.get();
  uk.lda = int64_t(h) * (dn + dr);
  uk.stride_a = dn + dr;
  uk.b = w_kvb_.get();
  uk.ldb = r;
  uk.stride_b = int64_t(dn + dv) * r;
  uk.b_transposed = false;
  uk.c = q_abs_.get();
  uk.ldc = int64_t(h) * lat_;
  uk.stride_c = lat_;
  RETURN_IF_ERROR(kernels::Gemm(uk, ctx_));
  RETURN_IF_ERROR(Cuda(cudaMemcpy2DAsync(q_abs_.get<char>() + size_t(r) * kBf16, lat_ * kBf16,
                                         q_.get<char>() + size_t(dn) * kBf16, (dn + dr) * kBf16,
                                         dr * kBf16, size_t(total_q_) * h,
                                         cudaMemcpyDeviceToDevice, nullptr),
                       "q_pe copy"));
  kernels::MlaParams p;
  p.dtype = DType::kBF16;
  p.batch = batch_;
  p.num_heads = h;
  p.kv_lora_rank = r;
  p.rope_dim = dr;
  p.q = q_abs_.get();
  p.q_token_stride = int64_t(h) * lat_;
  p.q_head_stride = lat_;
  p.kv_cache = cache_.get();
  p.num_pages = num_pages_;
  p.block_table = block_table_.get<int32_t>();
  p.max_pages_per_seq = max_pages_per_seq_;
  p.cu_seqlens_q = cu_q_.get<int32_t>();
  p.seqlens_k = seqlens_k_.get<int32_t>();
  p.max_seqlen_q = max_q_;
  p.max_seqlen_k = max_k_;
  p.out = out_lat_.get();
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(dn + dr));
  p.causal = true;
  RETURN_IF_ERROR(kernels::MlaPrefill(p, ctx_));
  // out[t, h] = out_lat[t, h] . W_UV[h]^T  (W_UV[h] = rows [h*(dn+dv)+dn, +dv) of kv_b_proj)
  kernels::GemmParams uv;
  uv.dtype = DType::kBF16;
  uv.batch = h;
  uv.m = total_q_;
  uv.n = dv;
  uv.k = r;
  uv.a = out_lat_.get();
  uv.lda = int64_t(h) * r;
  uv.stride_a = r;
  uv.b = w_kvb_.get<char>() + size_t(dn) * r * kBf16;
  uv.ldb = r;
  uv.stride_b = int64_t(dn + dv) * r;
  uv.b_transposed = true;
  uv.c = o_.get();
  uv.ldc = int64_t(h) * dv;
  uv.stride_c = dv;
  return kernels::Gemm(uv, ctx_);
}

absl::StatusOr<double> CudaPathTimer::TimeDecodeStep(int batch, int context) {
  if (int64_t(batch) * (context + kPage) > int64_t(num_pages_) * kPage ||
      batch > l_.max_batch || batch > l_.max_sum_extend) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode step ", batch, " x ", context, " exceeds the timer's buffers"));
  }
  std::vector<SequenceShape> seqs(batch, SequenceShape{context - 1, 1});
  RETURN_IF_ERROR(Prepare(seqs));
  kernels::MlaDecodeShape shape{batch, s_.heads, 1, s_.kv_lora_rank, s_.qk_rope_head_dim,
                                context, 0};
  cudaDeviceProp prop;
  RETURN_IF_ERROR(Cuda(cudaGetDeviceProperties(&prop, device_), "device properties"));
  shape.num_sms = prop.multiProcessorCount;
  shape.dram_bytes_per_sm_clock = kernels::cuda::CurrentDeviceDramBytesPerSmClock();
  ASSIGN_OR_RETURN(kernels::MlaDecodePlan plan, kernels::PlanMlaDecode(shape));
  DeviceBuffer workspace;
  RETURN_IF_ERROR(workspace.Allocate(plan.workspace_bytes, "decode workspace"));
  kernels::MlaParams p;
  p.dtype = DType::kBF16;
  p.batch = batch;
  p.num_heads = s_.heads;
  p.kv_lora_rank = s_.kv_lora_rank;
  p.rope_dim = s_.qk_rope_head_dim;
  p.q = q_abs_.get();
  p.q_token_stride = int64_t(s_.heads) * lat_;
  p.q_head_stride = lat_;
  p.kv_cache = cache_.get();
  p.num_pages = num_pages_;
  p.block_table = block_table_.get<int32_t>();
  p.max_pages_per_seq = max_pages_per_seq_;
  p.cu_seqlens_q = cu_q_.get<int32_t>();
  p.seqlens_k = seqlens_k_.get<int32_t>();
  p.max_seqlen_q = 1;
  p.max_seqlen_k = context;
  p.out = out_lat_.get();
  p.softmax_scale = 1.0f / std::sqrt(float(s_.qk_nope_head_dim + s_.qk_rope_head_dim));
  p.causal = true;
  return MedianUs([&] { return kernels::MlaDecode(p, plan, workspace.get(), ctx_); }, l_.warmup,
                  std::max(l_.reps, 5));
}

absl::StatusOr<double> CudaPathTimer::TimeDenseGemm(int m) { return DenseGemmUs(m, ctx_); }

absl::StatusOr<DeviceFacts> CudaPathTimer::MeasureDevice() { return MeasureDeviceFacts(device_, ctx_); }

absl::StatusOr<DecodeSplit> CudaPathTimer::PlanDecode(int batch, int context) {
  cudaDeviceProp prop;
  RETURN_IF_ERROR(Cuda(cudaGetDeviceProperties(&prop, device_), "device properties"));
  kernels::MlaDecodeShape shape{batch, s_.heads, 1, s_.kv_lora_rank, s_.qk_rope_head_dim,
                                context, prop.multiProcessorCount};
  shape.dram_bytes_per_sm_clock = kernels::cuda::CurrentDeviceDramBytesPerSmClock();
  ASSIGN_OR_RETURN(kernels::MlaDecodePlan plan, kernels::PlanMlaDecode(shape));
  return DecodeSplit{batch, context, plan.num_splits, plan.chunk_tokens};
}

}  // namespace

absl::StatusOr<std::unique_ptr<PathTimer>> PathTimer::Create(int device,
                                                             const AttentionShape& shape,
                                                             const TimerLimits& limits) {
  if (shape.dtype != "bf16") {
    return absl::UnimplementedError(absl::StrCat("the tuner times bf16 paths only; shape dtype is ",
                                                 shape.dtype));
  }
  auto timer = std::make_unique<CudaPathTimer>(device, shape, limits);
  RETURN_IF_ERROR(timer->Init());
  RETURN_IF_ERROR(timer->ChooseProviders());
  return std::unique_ptr<PathTimer>(std::move(timer));
}

}  // namespace mlaserve::profiles::tune
