// When the Hopper mha_prefill kernel takes a call, and the one place where its runtime head
// dims become a configuration (mha_prefill_sm90_d*.cu).
#include "kernels/mha_prefill/mha_prefill_sm90.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/common/device_arch.h"
#include "kernels/common/env_switch.h"
#include "kernels/mha_prefill/mha_prefill_sm90_kernel.cuh"

namespace mlaserve::kernels::mha_sm90 {
namespace {

// Coordinates of the TMA views are int32: max_len * (batch + 1) must stay below 2^31.
constexpr int64_t kMaxTmaCoord = std::numeric_limits<int32_t>::max();

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

bool Available() {
#if MLASERVE_HAS_SM90A
  return cuda::CurrentDeviceIsSm90();
#else
  return false;  // not built for sm_90a
#endif
}

std::string Refusal(const MhaPrefillParams& p) {
  if (p.dtype != DType::kBF16) return absl::StrCat("dtype ", DTypeName(p.dtype), " (bf16 only)");
  const bool dims = p.head_dim_v == 128 && (p.head_dim_qk == 192 || p.head_dim_qk == 128);
  if (!dims) {
    return absl::StrCat("head dims ", p.head_dim_qk, "/", p.head_dim_v, " (192/128 or 128/128 only)");
  }
  for (const auto& [name, ptr] : {std::pair{"q", p.q}, {"k", p.k}, {"v", p.v}, {"out", p.out}}) {
    if (!Aligned16(ptr)) return absl::StrCat(name, " is not 16-byte aligned");
  }
  for (const auto& [name, stride] :
       {std::pair{"q_token_stride", p.q_token_stride}, {"q_head_stride", p.q_head_stride},
        {"k_token_stride", p.k_token_stride}, {"k_head_stride", p.k_head_stride},
        {"v_token_stride", p.v_token_stride}, {"v_head_stride", p.v_head_stride},
        {"out_token_stride", p.out_token_stride}, {"out_head_stride", p.out_head_stride}}) {
    if (stride % 8 != 0) return absl::StrCat(name, "=", stride, " is not a multiple of 8");
  }
  if (p.k_rope != nullptr) {  // split K (api.h): the kernel's K tail view is 64 dims
    if (p.k_rope_dim != 64) return absl::StrCat("k_rope_dim ", p.k_rope_dim, " (a split K takes 64)");
    if (!Aligned16(p.k_rope)) return "k_rope is not 16-byte aligned";
    if (p.k_rope_token_stride % 8 != 0) {
      return absl::StrCat("k_rope_token_stride=", p.k_rope_token_stride, " is not a multiple of 8");
    }
    if (reinterpret_cast<uintptr_t>(p.k_rope) < static_cast<uintptr_t>(p.max_seqlen_k) * p.k_rope_token_stride * 2) {
      return "k_rope lies below its TMA view's base";
    }
  }
  if (p.max_seqlen_q < 1 || p.max_seqlen_k < 1) {
    return absl::StrCat("max_seqlen_q=", p.max_seqlen_q, ", max_seqlen_k=", p.max_seqlen_k, " (>= 1)");
  }
  for (const auto& [name, len] : {std::pair{"max_seqlen_q", p.max_seqlen_q}, {"max_seqlen_k", p.max_seqlen_k}}) {
    if (static_cast<int64_t>(len) * (p.batch + 1) > kMaxTmaCoord) {
      return absl::StrCat(name, "=", len, " x (batch + 1) exceeds the TMA coordinate range");
    }
  }
  // The TMA views start max_len rows before each buffer (mha_prefill_sm90_kernel.cuh). Not
  // asked of out: its view (Schedule::staged_out) falls back to direct stores instead.
  for (const auto& [name, ptr, len, stride] :
       {std::tuple{"q", p.q, p.max_seqlen_q, p.q_token_stride}, {"k", p.k, p.max_seqlen_k, p.k_token_stride},
        {"v", p.v, p.max_seqlen_k, p.v_token_stride}}) {
    if (reinterpret_cast<uintptr_t>(ptr) < static_cast<uintptr_t>(len) * stride * 2) {
      return absl::StrCat(name, " lies below its TMA view's base");
    }
  }
  return "";
}

// staged_out for qk 128 (where it fits): 0.6-5.5% over the direct stores in every 4k-16k cell of
// the H200 benchmark (docs/BENCHMARKS.md, fifteenth session). MLASERVE_MHA_TICKETS=0 deals the
// persistent CTAs' items by round instead of by ticket (A/B timing of whole workloads).
// lazy_rescale for qk 128: ahead in 17 of 18 4k-16k cells over three H200 rounds (+2.0 to +4.7%
// at h 128, the one loss h 16 8k -2.6% in one round); for qk 192 it moved the cells by -4 to +5%
// around even, so that stays as it was (docs/BENCHMARKS.md, nineteenth session).
// lookahead for qk 128 (the second Q buffer fits there only): MLASERVE_MHA_LOOKAHEAD=0 turns it
// off (A/B timing).
Schedule DefaultSchedule(int head_dim_qk) {
  static const bool tickets_off = EnvSwitchedOff("MLASERVE_MHA_TICKETS");
  static const bool lookahead_off = EnvSwitchedOff("MLASERVE_MHA_LOOKAHEAD");
  Schedule s{head_dim_qk <= 128, true, true, head_dim_qk <= 128};
  s.tickets = !tickets_off;
  s.lazy_rescale = head_dim_qk <= 128;
  s.lookahead = head_dim_qk <= 128 && !lookahead_off;
  return s;
}

std::string ScheduleName(Schedule schedule) {
  return absl::StrCat(schedule.pingpong ? "pingpong" : "no-pingpong", schedule.paired ? "+paired" : "+single",
                      schedule.persistent ? "+persistent" : "+launched", schedule.staged_out ? "+staged" : "",
                      schedule.longest_first ? "" : "+flat", schedule.tickets ? "" : "+dealt",
                      schedule.ctas > 0 ? absl::StrCat("+ctas=", schedule.ctas) : "",
                      schedule.lazy_rescale ? "+lazy" : "", schedule.lookahead ? "+ahead" : "");
}

absl::Status Launch(const MhaPrefillParams& p, Schedule schedule, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (p.head_dim_qk == 192) return LaunchMhaPrefillSm90<192, 128>(p, schedule, s);
  return LaunchMhaPrefillSm90<128, 128>(p, schedule, s);
}

}  // namespace mlaserve::kernels::mha_sm90
