// gemm CUDA backend: the small-M kernel where it applies (gemm_small_m.h), else cuBLASLt, bf16
// (or f32) operands, f32 accumulation, bias as an epilogue, strided batches through the layouts'
// batch attributes; a second output (c2) as two cuBLASLt calls over B's two row blocks.
//
// Row-major to cuBLASLt (column-major): a row-major [r, c] matrix with row stride ld is a
// column-major [c, r] matrix with leading dimension ld. So C = A * op(B) in row-major is
// C^T = op(B)^T * A^T in column-major: cuBLASLt's "A" is our B (transposed when B is [n, k]),
// its "B" is our A, and its output is C with m' = n, n' = m. The bias epilogue adds a vector
// along m' = n, i.e. bias[j] to every row of our C.
//
// One cublasLt handle and one workspace per stream, created on the stream's first call and
// kept for the life of the process (never per call); matmul descriptors, layouts and the
// heuristic's algorithm are cached per stream and shape, so a repeated shape costs no
// heuristic query. Run every shape once before capturing a CUDA graph: the first call on a
// stream allocates its workspace.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/env_switch.h"
#include "kernels/gemm/api.h"
#include "kernels/gemm/gemm_small_m.h"

namespace mlaserve::kernels {
namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;  // cuBLAS's advice for Hopper
constexpr int kMaxAlignment = 256;             // cuBLASLt's default assumption

absl::Status LtStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("gemm: ", what, " failed: cublas status ", static_cast<int>(s)));
}

#define GEMM_LT(expr)                                                      \
  do {                                                                     \
    const cublasStatus_t gemm_s_ = (expr);                                 \
    if (gemm_s_ != CUBLAS_STATUS_SUCCESS) return LtStatus(gemm_s_, #expr); \
  } while (0)

// Largest power of two (<= 256) that divides the address: the alignment cuBLASLt may assume.
int AlignmentOf(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  int a = 1;
  while (a < kMaxAlignment && v % (2 * a) == 0) a *= 2;
  return a;
}

// Everything a cached plan depends on (pointers only through their alignment).
using PlanKey = std::tuple<int, bool, int, int, int, int, int64_t, int64_t, int64_t, int64_t,
                           int64_t, int64_t, bool, bool, int, int, int, int>;

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// One stream's cuBLASLt handle, workspace and plans. Its own mutex guards its plans (a plan's
// bias attribute is set per call) across the matmul; streams do not share it, so the ranks of a
// multi-GPU worker (a stream each, docs/parallel.md) never wait on one another here while one of
// them is blocked in a CUDA call.
struct StreamState {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::mutex mu;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
};

// Guards the map of states only (never held across a CUDA call).
std::mutex& StateMutex() {
  static std::mutex mu;
  return mu;
}
// Keyed by (stream, device): the legacy default stream (null) exists once per device.
std::map<std::pair<void*, int>, std::unique_ptr<StreamState>>& States() {
  static auto* states = new std::map<std::pair<void*, int>, std::unique_ptr<StreamState>>();
  return *states;
}

absl::StatusOr<StreamState*> StateFor(void* stream) {
  int device = 0;
  if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) {
    // No usable device (none present, or the driver missing): the caller asked for the CUDA
    // backend where it cannot run.
    return absl::FailedPreconditionError(
        absl::StrCat("gemm: the CUDA backend has no device: ", cudaGetErrorString(err)));
  }
  const std::pair<void*, int> key{stream, device};
  {
    std::lock_guard<std::mutex> lock(StateMutex());
    auto it = States().find(key);
    if (it != States().end()) return it->second.get();
  }
  // The first call on this stream: the handle and workspace are made outside the map's lock.
  auto st = std::make_unique<StreamState>();
  GEMM_LT(cublasLtCreate(&st->handle));
  const cudaError_t err = cudaMalloc(&st->workspace, kWorkspaceBytes);
  if (err != cudaSuccess) {
    cublasLtDestroy(st->handle);
    return absl::ResourceExhaustedError(absl::StrCat(
        "gemm: cudaMalloc of the ", kWorkspaceBytes, "-byte cuBLASLt workspace failed: ",
        cudaGetErrorString(err)));
  }
  std::lock_guard<std::mutex> lock(StateMutex());
  auto& slot = States()[key];
  if (slot == nullptr) {
    slot = std::move(st);
  } else {  // another thread made this stream's state meanwhile: keep that one
    (void)cudaFree(st->workspace);
    cublasLtDestroy(st->handle);
  }
  return slot.get();
}

absl::Status MakeLayout(cublasLtMatrixLayout_t* out, cudaDataType_t type, int64_t rows,
                        int64_t cols, int64_t ld, int batch, int64_t stride) {
  GEMM_LT(cublasLtMatrixLayoutCreate(out, type, rows, cols, ld));
  if (batch > 1) {
    GEMM_LT(cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                             sizeof(batch)));
    GEMM_LT(cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                             &stride, sizeof(stride)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Plan>> MakePlan(const GemmParams& p, cublasLtHandle_t handle,
                                               const int (&align)[4]) {
  const bool f32 = p.dtype == DType::kF32;
  const cudaDataType_t ab_type = f32 ? CUDA_R_32F : CUDA_R_16BF;
  const cudaDataType_t c_type = (f32 || p.c_f32) ? CUDA_R_32F : CUDA_R_16BF;
  auto plan = std::make_unique<Plan>();
  GEMM_LT(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = p.b_transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t trans_b = CUBLAS_OP_N;
  GEMM_LT(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  GEMM_LT(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  if (p.bias != nullptr) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    GEMM_LT(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    GEMM_LT(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                           &c_type, sizeof(c_type)));
  }
  // cuBLASLt "A" = our B: [k, n] column-major when B is [n, k] row-major (then transposed).
  if (p.b_transposed) {
    RETURN_IF_ERROR(MakeLayout(&plan->a, ab_type, p.k, p.n, p.ldb, p.batch, p.stride_b));
  } else {
    RETURN_IF_ERROR(MakeLayout(&plan->a, ab_type, p.n, p.k, p.ldb, p.batch, p.stride_b));
  }
  RETURN_IF_ERROR(MakeLayout(&plan->b, ab_type, p.k, p.m, p.lda, p.batch, p.stride_a));
  RETURN_IF_ERROR(MakeLayout(&plan->c, c_type, p.n, p.m, p.ldc, p.batch, p.stride_c));

  cublasLtMatmulPreference_t pref = nullptr;
  GEMM_LT(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = static_cast<uint32_t>(align[i]);
    cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &v, sizeof(v));
  }
  // Determinism: one algorithm per key, chosen once and cached; every reduction scheme the
  // heuristic may return for split-K is ordered (in place with ordering counters, or a separate
  // reduction pass), so calls and processes give the same bits on one GPU model. Split-K is
  // not masked off: it only costs decode-shaped GEMMs speed (docs/kernels.md, "Determinism").
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(handle, plan->desc, plan->a, plan->b,
                                                           plan->c, plan->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemm: cuBLASLt has no algorithm for dtype=", DTypeName(p.dtype), " c_f32=", p.c_f32,
        " m=", p.m, " n=", p.n, " k=", p.k, " batch=", p.batch, " lda=", p.lda, " ldb=", p.ldb,
        " ldc=", p.ldc, " (status ", static_cast<int>(hs), ")"));
  }
  plan->algo = result.algo;
  // MLASERVE_GEMM_LOG_PLANS=1: one stderr line per plan made (a shape's first call on a stream):
  // the algorithm's id, tile, split-K and reduction scheme, and the workspace it asks for. A
  // non-zero workspace is what makes cuBLASLt put a memset before each of that shape's calls.
  if (const char* log = std::getenv("MLASERVE_GEMM_LOG_PLANS"); log != nullptr && log[0] == '1') {
    int32_t splitk = 0, scheme = 0, tile = 0, id = 0;
    size_t written = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&plan->algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &written);
    cublasLtMatmulAlgoConfigGetAttribute(&plan->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk), &written);
    cublasLtMatmulAlgoConfigGetAttribute(&plan->algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme),
                                         &written);
    cublasLtMatmulAlgoConfigGetAttribute(&plan->algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &written);
    std::fprintf(stderr, "gemm plan: m=%d n=%d k=%d batch=%d bias=%d algo=%d tile=%d splitk=%d reduction=%d workspace=%zu\n",
                 p.m, p.n, p.k, p.batch, p.bias != nullptr, id, tile, splitk, scheme, result.workspaceSize);
  }
  return plan;
}

absl::Status CublasLtGemm(const GemmParams& p, void* stream) {
  const int align[4] = {AlignmentOf(p.b), AlignmentOf(p.a), AlignmentOf(p.c), AlignmentOf(p.c)};
  const PlanKey key{static_cast<int>(p.dtype), p.c_f32 && p.dtype != DType::kF32, p.m, p.n, p.k,
                    p.batch, p.lda, p.ldb, p.ldc, p.batch > 1 ? p.stride_a : 0,
                    p.batch > 1 ? p.stride_b : 0, p.batch > 1 ? p.stride_c : 0, p.b_transposed,
                    p.bias != nullptr, align[0], align[1], align[2], align[3]};
  ASSIGN_OR_RETURN(StreamState * st, StateFor(stream));
  std::lock_guard<std::mutex> lock(st->mu);
  auto& plan = st->plans[key];
  if (plan == nullptr) {
    auto made = MakePlan(p, st->handle, align);
    if (!made.ok()) {
      st->plans.erase(key);
      return made.status();
    }
    plan = std::move(made).value();
  }
  if (p.bias != nullptr) {
    GEMM_LT(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                           &p.bias, sizeof(p.bias)));
  }
  GEMM_LT(cublasLtMatmul(st->handle, plan->desc, &p.alpha, p.b, plan->a, p.a, plan->b, &p.beta,
                         p.c, plan->c, p.c, plan->c, &plan->algo, st->workspace, kWorkspaceBytes,
                         static_cast<cudaStream_t>(stream)));
  return absl::OkStatus();
}

// MLASERVE_GEMM_SMALL_M=0 keeps kAuto on cuBLASLt (for timing comparisons; kSmallM still runs).
bool SmallMAutoDisabled() {
  static const bool disabled = EnvSwitchedOff("MLASERVE_GEMM_SMALL_M");
  return disabled;
}

// Why `p` does not run on the small-M kernel, or null.
const char* SmallMRefusalFor(const GemmParams& p) {
  if (p.path == GemmPath::kCublasLt) return "path=kCublasLt was asked";
  if (p.path == GemmPath::kAuto && SmallMAutoDisabled()) return "MLASERVE_GEMM_SMALL_M=0";
  if (const char* refusal = gemm_cuda::SmallMRefusal(p); refusal != nullptr) return refusal;
  if (p.path == GemmPath::kAuto && !gemm_cuda::SmallMFasterThanCublasLt(p)) {
    return "kAuto: cuBLASLt measured faster for this shape (gemm_small_m.h)";
  }
  return nullptr;
}

// The product's columns [c2_begin, n) as their own GEMM writing c2.
GemmParams SecondOutput(const GemmParams& p) {
  const size_t ab = DTypeSize(p.dtype);
  const size_t out = p.c_f32 || p.dtype == DType::kF32 ? 4 : 2;
  GemmParams q = p;
  q.n = p.n - p.c2_begin;
  q.b = static_cast<const char*>(p.b) +
        (p.b_transposed ? p.c2_begin * p.ldb : p.c2_begin) * static_cast<int64_t>(ab);
  q.c = p.c2;
  q.ldc = p.ldc2;
  if (p.bias != nullptr) q.bias = static_cast<const char*>(p.bias) + p.c2_begin * out;
  q.c2 = nullptr;
  return q;
}

}  // namespace

absl::Status GemmCuda(const GemmParams& p, void* stream) {
  if (p.dtype != DType::kBF16 && p.dtype != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemm: the CUDA backend supports dtype=bf16 or f32, got ", DTypeName(p.dtype)));
  }
  const char* refusal = SmallMRefusalFor(p);
  if (refusal == nullptr) return gemm_cuda::LaunchSmallM(p, static_cast<cudaStream_t>(stream));
  if (p.path == GemmPath::kSmallM || p.epilogue != GemmEpilogue::kNone) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemm: ", p.epilogue != GemmEpilogue::kNone ? "the SiLU-and-mul epilogue" : "path=kSmallM",
        " needs the small-M kernel, which does not take m=", p.m, " n=", p.n, " k=", p.k,
        " lda=", p.lda, " ldb=", p.ldb, " batch=", p.batch, ": ", refusal));
  }
  if (p.c2 != nullptr) {
    GemmParams first = p;
    first.n = p.c2_begin;
    first.c2 = nullptr;
    RETURN_IF_ERROR(CublasLtGemm(first, stream));
    return CublasLtGemm(SecondOutput(p), stream);
  }
  return CublasLtGemm(p, stream);
}

bool GemmRunsSmallM(const GemmParams& p, Backend backend) {
  return backend == Backend::kCuda && SmallMRefusalFor(p) == nullptr;
}

}  // namespace mlaserve::kernels
