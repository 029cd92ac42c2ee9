// mha_prefill, cuDNN provider (kCudnn, and kAuto where it can run the call): cuDNN's fused SDPA
// forward through the cuDNN frontend graph API, on the same ragged bf16 Q/K/V/out and LSE as
// our kernel (api.h).
//
// Library: libcudnn.so.9 is dlopened on first use. The frontend is compiled with
// NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING: its cudnn* calls resolve through cudnn_dlhandle, and
// its few CUDA runtime calls (device properties, graph retention) through
// libcudart.so.<our CUDA major>. Without either, the provider is UNAVAILABLE and ours runs.
//
// The batch as cuDNN sees it: Q/K/V/O are [b, h, s, d] tensors whose sequences are packed
// (ragged offsets: element offset of each sequence's first token, from cu_seqlens) and whose
// lengths come from a padding mask (seq_len_q / seq_len_kv). Causal is a right bound of 0 with
// bottom-right alignment, applied per sequence to its actual lengths: query i sees keys
// j <= i + (lk - lq), api.h's causal. Stats (cuDNN's LSE: natural log of the scaled scores,
// the same quantity as ours) is [b, h, s, 1] with token-major strides and the same ragged
// offsets, i.e. exactly our lse[total_q, num_heads]. The arrays are built on the device
// (cudnn_sdpa.h), so a call reads nothing back to the host.
//
// Plans: a graph is built and planned once per shape key (batch, heads, head dims, strides,
// causal, LSE or not, scale, and the longest lengths rounded up to a power of two, so that a
// serving mix of lengths reuses a few plans; shorter sequences are masked by their lengths)
// and executed many times. Nothing is built while the stream is being captured into a CUDA
// graph: such a call returns FAILED_PRECONDITION and kAuto runs ours. A key cuDNN cannot run
// is remembered with cuDNN's reason.
//
// Memory (the provider's arena, per device and stream): the ragged-batch arrays followed by
// cuDNN's workspace. It grows with cudaMalloc when a new plan needs more (never during
// capture); a smaller one it replaces is kept, not freed, since a captured CUDA graph may still
// point into it. Arenas and plans live as long as the process (at most kMaxGraphsPerStream
// plans per stream, least recently used evicted).
//
// Thread safety: one mutex (CudnnSdpa::mu_) over the plans and arenas; a call holds it while
// it plans (once per key) and enqueues (microseconds).
#include <dlfcn.h>

#include <cuda_runtime_api.h>
#include <cudnn_frontend.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status.h"
#include "kernels/mha_prefill/cudnn_sdpa.h"
#include "kernels/mha_prefill/mha_prefill_providers.h"

// The handle the dynamically loading frontend resolves cudnn* symbols through (set below).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace mlaserve::kernels {
namespace {

namespace fe = cudnn_frontend;

constexpr const char* kCudnnLibrary = "libcudnn.so.9";
constexpr int kMaxHeadDim = 256;          // cuDNN's bf16 SDPA bound on Hopper
constexpr int kMinPlannedSeqlen = 64;     // shortest s of a planned graph
constexpr size_t kMaxGraphsPerStream = 64;
constexpr size_t kArenaGranularity = size_t{1} << 20;
constexpr int64_t kChunkElems = 8;        // 16-byte rows of bf16

// Tensor uids of the graph's variant pack.
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kSeqLenQ, kSeqLenKv,
  kQOffset, kKOffset, kVOffset, kOOffset, kStatsOffset,
};

struct Library {
  absl::Status status;  // OK, or UNAVAILABLE saying why
  std::string version;  // "cuDNN 9.13.0"
};

const Library& LoadLibrary() {
  static const Library* const library = [] {
    auto* lib = new Library;
    // The frontend's CUDA runtime calls go to the runtime of our major version; a
    // CUDNN_FRONTEND_CUDART_LIB_NAME set by the user wins (setenv does not overwrite it).
    const std::string cudart = absl::StrCat("libcudart.so.", CUDART_VERSION / 1000);
    setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", cudart.c_str(), /*overwrite=*/0);
    const char* cudart_name = std::getenv("CUDNN_FRONTEND_CUDART_LIB_NAME");
    if (dlopen(cudart_name, RTLD_NOW | RTLD_LOCAL) == nullptr) {
      lib->status = absl::UnavailableError(absl::StrCat(
          cudart_name, " (the cuDNN frontend's CUDA runtime) could not be loaded: ", dlerror()));
      return lib;
    }
    void* handle = dlopen(kCudnnLibrary, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      lib->status = absl::UnavailableError(absl::StrCat(
          kCudnnLibrary, " could not be loaded (", dlerror(),
          "); put cuDNN 9's lib directory on LD_LIBRARY_PATH"));
      return lib;
    }
    fe::cudnn_dlhandle = handle;
    try {
      const size_t v = fe::detail::get_backend_version();  // major*10000 + minor*100 + patch
      lib->version = absl::StrCat("cuDNN ", v / 10000, ".", v / 100 % 100, ".", v % 100);
    } catch (const std::exception& e) {
      lib->status = absl::UnavailableError(absl::StrCat(kCudnnLibrary, ": ", e.what()));
    }
    return lib;
  }();
  return *library;
}

// What the cuDNN provider adds to the dispatcher's checks; INVALID_ARGUMENT naming the value.
absl::Status CanImplement(const MhaPrefillParams& p) {
  if (p.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mha_prefill: the cuDNN provider supports dtype=bf16 only, got ", DTypeName(p.dtype)));
  }
  for (const auto& [name, d] : {std::pair{"head_dim_qk", p.head_dim_qk}, {"head_dim_v", p.head_dim_v}}) {
    if (d % kChunkElems != 0 || d > kMaxHeadDim) {
      return absl::InvalidArgumentError(absl::StrCat("mha_prefill: ", name, "=", d,
                                                     " is not supported by cuDNN (multiples of 8 up to ",
                                                     kMaxHeadDim, ")"));
    }
  }
  for (const auto& [name, ptr] : {std::pair{"q", p.q}, {"k", p.k}, {"v", p.v}, {"out", p.out}}) {
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("mha_prefill: ", name, " is not 16-byte aligned (cuDNN needs it)"));
    }
  }
  for (const auto& [name, stride] :
       {std::pair{"q_token_stride", p.q_token_stride}, {"q_head_stride", p.q_head_stride},
        {"k_token_stride", p.k_token_stride}, {"k_head_stride", p.k_head_stride},
        {"v_token_stride", p.v_token_stride}, {"v_head_stride", p.v_head_stride},
        {"out_token_stride", p.out_token_stride}, {"out_head_stride", p.out_head_stride}}) {
    if (stride % kChunkElems != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mha_prefill: ", name, "=", stride, " must be a multiple of 8 for cuDNN (16-byte rows)"));
    }
  }
  return absl::OkStatus();
}

int PlannedSeqlen(int max_seqlen) {
  int s = kMinPlannedSeqlen;
  while (s < max_seqlen) s *= 2;
  return s;
}

// What a plan depends on. Lengths are the planned (rounded-up) maxima.
struct GraphKey {
  int batch, heads, kv_heads, dqk, dv, s_q, s_kv;
  bool causal, lse;
  uint32_t scale_bits;
  int64_t q_token, q_head, k_token, k_head, v_token, v_head, o_token, o_head;
  auto operator<=>(const GraphKey&) const = default;
};

GraphKey MakeKey(const MhaPrefillParams& p) {
  GraphKey key{};
  key.batch = p.batch;
  key.heads = p.num_heads;
  key.kv_heads = p.num_kv_heads;
  key.dqk = p.head_dim_qk;
  key.dv = p.head_dim_v;
  key.s_q = PlannedSeqlen(p.max_seqlen_q);
  key.s_kv = PlannedSeqlen(p.max_seqlen_k);
  key.causal = p.causal;
  key.lse = p.lse != nullptr;
  std::memcpy(&key.scale_bits, &p.softmax_scale, sizeof(key.scale_bits));
  key.q_token = p.q_token_stride;
  key.q_head = p.q_head_stride;
  key.k_token = p.k_token_stride;
  key.k_head = p.k_head_stride;
  key.v_token = p.v_token_stride;
  key.v_head = p.v_head_stride;
  key.o_token = p.out_token_stride;
  key.o_head = p.out_head_stride;
  return key;
}

std::string Describe(const GraphKey& k) {
  return absl::StrCat("batch=", k.batch, " heads=", k.heads, "/", k.kv_heads, " head dims ", k.dqk,
                      "/", k.dv, " s_q<=", k.s_q, " s_kv<=", k.s_kv, k.causal ? " causal" : "",
                      k.lse ? " with lse" : "");
}

// The SDPA graph of `key` (not yet built).
std::shared_ptr<fe::graph::Graph> MakeGraph(const GraphKey& key) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const int64_t b = key.batch;
  auto offsets = [&](const char* name, Uid uid) {
    return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid)
                         .set_dim({b + 1, 1, 1, 1}).set_stride({1, 1, 1, 1})
                         .set_data_type(fe::DataType_t::INT64));
  };
  auto lengths = [&](const char* name, Uid uid) {
    return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid)
                         .set_dim({b, 1, 1, 1}).set_stride({1, 1, 1, 1})
                         .set_data_type(fe::DataType_t::INT32));
  };
  // [b, h, s, d] over packed tokens: element (b, h, s, d) at ragged_offset[b] + h * head_stride
  // + s * token_stride + d. The batch stride is what a padded layout would have; with ragged
  // offsets cuDNN does not use it.
  auto packed = [&](const char* name, Uid uid, int64_t heads, int64_t s, int64_t d, int64_t token,
                    int64_t head, Uid offset_uid, const char* offset_name) {
    return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid)
                         .set_dim({b, heads, s, d}).set_stride({s * token, head, token, 1})
                         .set_ragged_offset(offsets(offset_name, offset_uid)));
  };
  auto q = packed("q", kQ, key.heads, key.s_q, key.dqk, key.q_token, key.q_head, kQOffset, "q_offset");
  auto k = packed("k", kK, key.kv_heads, key.s_kv, key.dqk, key.k_token, key.k_head, kKOffset, "k_offset");
  auto v = packed("v", kV, key.kv_heads, key.s_kv, key.dv, key.v_token, key.v_head, kVOffset, "v_offset");
  float scale;
  std::memcpy(&scale, &key.scale_bits, sizeof(scale));
  auto sdpa = fe::graph::SDPA_attributes()
                  .set_name("mha_prefill")
                  .set_generate_stats(key.lse)
                  .set_attn_scale(scale)
                  .set_padding_mask(true)
                  .set_seq_len_q(lengths("seq_len_q", kSeqLenQ))
                  .set_seq_len_kv(lengths("seq_len_kv", kSeqLenKv));
  if (key.causal) {
    sdpa.set_diagonal_alignment(fe::DiagonalAlignment_t::BOTTOM_RIGHT).set_diagonal_band_right_bound(0);
  }
  auto [o, stats] = g->sdpa(q, k, v, sdpa);
  o->set_output(true).set_uid(kO).set_dim({b, key.heads, key.s_q, key.dv})
      .set_stride({key.s_q * key.o_token, key.o_head, key.o_token, 1})
      .set_ragged_offset(offsets("o_offset", kOOffset));
  if (key.lse) {
    stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT)
        .set_dim({b, key.heads, key.s_q, 1})
        .set_stride({key.s_q * key.heads, 1, key.heads, 1})
        .set_ragged_offset(offsets("stats_offset", kStatsOffset));
  }
  return g;
}

struct PlannedGraph {
  std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN cannot run the key, for `why`
  std::string why;
  int64_t workspace_bytes = 0;
  uint64_t last_use = 0;
};

// One device and stream: a cuDNN handle bound to it, its plans and its arena.
struct StreamState {
  cudnnHandle_t handle = nullptr;
  absl::Status handle_status;  // why cudnnCreate failed, once it has (not retried)
  void* arena = nullptr;
  size_t arena_bytes = 0;
  std::vector<void*> retired_arenas;  // kept: a captured CUDA graph may still use them
  std::map<GraphKey, PlannedGraph> graphs;
  uint64_t clock = 0;
};

absl::Status Cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("mha_prefill cudnn: ", what, ": ", cudaGetErrorString(err)));
}

class CudnnSdpa {
 public:
  static CudnnSdpa& Get() {
    static CudnnSdpa* const instance = new CudnnSdpa;  // never destroyed: plans outlive main
    return *instance;
  }

  absl::Status Run(const MhaPrefillParams& p, cudaStream_t stream) ABSL_LOCKS_EXCLUDED(mu_) {
    int device = 0;
    RETURN_IF_ERROR(Cuda(cudaGetDevice(&device), "cudaGetDevice"));
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    RETURN_IF_ERROR(Cuda(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing"));
    const bool capturing = capture != cudaStreamCaptureStatusNone;
    const GraphKey key = MakeKey(p);

    absl::MutexLock lock(&mu_);
    StreamState& st = streams_[{device, stream}];
    if (st.handle == nullptr) {
      RETURN_IF_ERROR(st.handle_status);
      if (capturing) return NotPlanned(key);
      const cudnnStatus_t created = fe::detail::create_handle(&st.handle);
      if (created != CUDNN_STATUS_SUCCESS) {
        st.handle = nullptr;
        st.handle_status = absl::UnavailableError(absl::StrCat(
            "mha_prefill: cudnnCreate failed on device ", device, ": ", fe::detail::get_error_string(created)));
        return st.handle_status;
      }
    }
    if (fe::detail::set_stream(st.handle, stream) != CUDNN_STATUS_SUCCESS) {
      return absl::InternalError("mha_prefill cudnn: cudnnSetStream failed");
    }
    auto it = st.graphs.find(key);
    if (it == st.graphs.end()) {
      if (capturing) return NotPlanned(key);
      ASSIGN_OR_RETURN(it, Plan(st, key, stream));
    }
    PlannedGraph& planned = it->second;
    if (planned.graph == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("mha_prefill: cuDNN cannot run ", Describe(key), ": ", planned.why));
    }
    const size_t ragged_bytes = cudnn_sdpa::RaggedBatchBytes(p.batch);
    const size_t need = ragged_bytes + static_cast<size_t>(planned.workspace_bytes);
    if (need > st.arena_bytes) {
      if (capturing) return NotPlanned(key);
      RETURN_IF_ERROR(GrowArena(st, need));
    }
    planned.last_use = ++st.clock;

    const cudnn_sdpa::RaggedBatch ragged = cudnn_sdpa::CarveRaggedBatch(st.arena, p.batch);
    RETURN_IF_ERROR(cudnn_sdpa::LaunchRaggedBatch(p, ragged, stream));
    std::unordered_map<int64_t, void*> pack = {
        {kQ, const_cast<void*>(p.q)}, {kK, const_cast<void*>(p.k)}, {kV, const_cast<void*>(p.v)},
        {kO, p.out}, {kSeqLenQ, ragged.seq_len_q}, {kSeqLenKv, ragged.seq_len_kv},
        {kQOffset, ragged.q_offset}, {kKOffset, ragged.k_offset}, {kVOffset, ragged.v_offset},
        {kOOffset, ragged.o_offset}};
    if (key.lse) {
      pack[kStats] = p.lse;
      pack[kStatsOffset] = ragged.stats_offset;
    }
    void* workspace = static_cast<char*>(st.arena) + ragged_bytes;
    try {
      auto status = planned.graph->execute(st.handle, pack, workspace);
      if (status.is_bad()) {
        return absl::InternalError(absl::StrCat("mha_prefill: cuDNN execute failed for ", Describe(key),
                                                ": ", status.get_message()));
      }
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("mha_prefill: cuDNN execute threw for ", Describe(key),
                                              ": ", e.what()));
    }
    RETURN_IF_ERROR(Cuda(cudaGetLastError(), "after cuDNN execute"));
    // The chunk against its own keys (one cu_seqlens for both, causal) has no keyless row.
    if (p.causal && p.cu_seqlens_q == p.cu_seqlens_k) return absl::OkStatus();
    return cudnn_sdpa::LaunchClearKeylessRows(p, stream);
  }

 private:
  using Graphs = std::map<GraphKey, PlannedGraph>;

  static absl::Status NotPlanned(const GraphKey& key) {
    return absl::FailedPreconditionError(absl::StrCat(
        "mha_prefill: the cuDNN graph for ", Describe(key),
        " was not planned before the stream began capturing (run the shape once eagerly first)"));
  }

  // Builds and plans `key` (or records why cuDNN cannot), evicting the least recently used
  // plan when the stream holds kMaxGraphsPerStream.
  absl::StatusOr<Graphs::iterator> Plan(StreamState& st, const GraphKey& key, cudaStream_t stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (st.graphs.size() >= kMaxGraphsPerStream) {
      // The evicted plan's kernels may still be running on the stream.
      RETURN_IF_ERROR(Cuda(cudaStreamSynchronize(stream), "draining the stream before evicting a plan"));
      auto lru = st.graphs.begin();
      for (auto i = st.graphs.begin(); i != st.graphs.end(); ++i) {
        if (i->second.last_use < lru->second.last_use) lru = i;
      }
      st.graphs.erase(lru);
    }
    PlannedGraph planned;
    try {
      auto graph = MakeGraph(key);
      auto status = graph->build(st.handle, {fe::HeurMode_t::A});
      if (status.is_good()) status = graph->get_workspace_size(planned.workspace_bytes);
      if (status.is_good()) {
        planned.graph = std::move(graph);
      } else {
        planned.why = status.get_message();
      }
    } catch (const std::exception& e) {
      planned.why = e.what();
    }
    // A failed build may leave an error for cudaGetLastError behind; it is not the caller's.
    (void)cudaGetLastError();
    return st.graphs.emplace(key, std::move(planned)).first;
  }

  static absl::Status GrowArena(StreamState& st, size_t need) {
    const size_t bytes = std::max(need, 2 * st.arena_bytes);
    void* arena = nullptr;
    const size_t rounded = (bytes + kArenaGranularity - 1) / kArenaGranularity * kArenaGranularity;
    if (cudaMalloc(&arena, rounded) != cudaSuccess) {
      (void)cudaGetLastError();
      return absl::ResourceExhaustedError(
          absl::StrCat("mha_prefill: the cuDNN provider's arena of ", rounded, " bytes could not be allocated"));
    }
    if (st.arena != nullptr) st.retired_arenas.push_back(st.arena);
    st.arena = arena;
    st.arena_bytes = rounded;
    return absl::OkStatus();
  }

  absl::Mutex mu_;
  std::map<std::pair<int, cudaStream_t>, StreamState> streams_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::string> MhaPrefillCudnnVersion() {
  const Library& lib = LoadLibrary();
  if (!lib.status.ok()) return lib.status;
  return lib.version;
}

absl::Status MhaPrefillCudnn(const MhaPrefillParams& p, void* stream) {
  const Library& lib = LoadLibrary();
  if (!lib.status.ok()) return lib.status;
  RETURN_IF_ERROR(CanImplement(p));
  if (p.batch == 0 || p.max_seqlen_q == 0) return absl::OkStatus();
  auto s = static_cast<cudaStream_t>(stream);
  // No sequence has a key: every row is keyless (cuDNN plans need s_kv >= 1).
  if (p.max_seqlen_k == 0) return cudnn_sdpa::LaunchClearKeylessRows(p, s);
  return CudnnSdpa::Get().Run(p, s);
}

}  // namespace mlaserve::kernels
