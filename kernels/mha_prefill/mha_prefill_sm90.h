// mha_prefill's Hopper kernel (sm_90a; design in mha_prefill_sm90_kernel.cuh): when it takes a
// call and how it is launched. MhaPrefillOursCuda (mha_prefill.cu) runs it for
// MhaPrefillKernel::kAuto where MhaPrefillWgmmaApplies, and the mma.sync kernel otherwise.
// Plain C++ (no CUDA types), so the dispatcher (mha_prefill.cc) can ask it too.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "kernels/mha_prefill/api.h"

namespace mlaserve::kernels::mha_sm90 {

// Whether this build has the sm_90a kernel and the current device is an sm_90 GPU (asked on
// every call: the answer is remembered per device).
bool Available();
// Why the kernel does not take p's shape and layout, or "" when it does (dtype bf16, head dims
// 192/128 or 128/128, 16-byte aligned pointers and strides, TMA-addressable lengths).
std::string Refusal(const MhaPrefillParams& p);
// The consumer warpgroups' schedule per head dims (FlashAttention-3's measured choice): with
// ping-pong for qk 128, without for qk 192, where the longer S product leaves less to hide.
bool DefaultPingPong(int head_dim_qk);
// Launches the kernel on `stream` (a cudaStream_t); the caller has checked Refusal(p) == "".
// `pingpong` overrides the default schedule (benchmarks time both).
absl::Status Launch(const MhaPrefillParams& p, bool pingpong, void* stream);

}  // namespace mlaserve::kernels::mha_sm90
