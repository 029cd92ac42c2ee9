// How Sample and ComputeLogprobs read a row whose logits are not all finite (api.h, "Non-finite
// logits"), written once for the CPU backend (sampling_ref.cc, logprobs_ref.cc) and the CUDA
// paths (sampling.cu, sampling_cluster.cu, logprobs.cu), which must agree bit for bit. Under
// nvcc the functions are __host__ __device__; each side calls its own exp / log, as before.
//
// The row's peak is its largest non-NaN logit (the greedy argmax's value). Callers handle a peak
// of -infinity or NaN themselves (no token above -infinity: no distribution); here the peak is
// finite or +infinity. For a finite peak and non-NaN logits every value is the one the kernels
// computed before these rows were defined, operation for operation.
#pragma once

#include <math.h>

#if defined(__CUDACC__)
#define MLASERVE_SAMPLING_FN __host__ __device__ __forceinline__
#else
#define MLASERVE_SAMPLING_FN inline
#endif

namespace mlaserve::kernels {

// A token's unnormalised probability, exp((x - peak) / T) in double (inv_t = 1 / T). A peak of
// +infinity: the +infinity tokens get 1 each (they share the row's mass equally, the limit of
// the softmax), every other token 0. A NaN logit gets 0; so does -infinity (exp(-inf)).
MLASERVE_SAMPLING_FN double SoftmaxTerm(float x, double peak, double inv_t) {
  if (peak == INFINITY) return x == INFINITY ? 1.0 : 0.0;
  const double e = exp((static_cast<double>(x) - peak) * inv_t);
  return e == e ? e : 0.0;  // NaN: only from a NaN logit (the peak is finite)
}

// log(sum of exp(x - peak)) over the row, shifted back: peak + log(sum) for a finite peak; for a
// +infinity peak sum counts the +infinity tokens (SoftmaxTerm's 1s), and the log-sum-exp is
// taken over the shifted row (those tokens at 0), so that TokenLogprob gives -log(count).
MLASERVE_SAMPLING_FN double RowLogSumExp(double peak, double sum) {
  return peak == INFINITY ? log(sum) : peak + log(sum);
}

// A token's logprob, f32: x - lse; -infinity for a NaN logit, for every token of a row with no
// token above -infinity (peak -infinity or NaN), and for the finite tokens of a +infinity row,
// whose +infinity tokens get -log(count). Never NaN.
MLASERVE_SAMPLING_FN float TokenLogprob(float x, double peak, double lse) {
  if (x != x || !(peak > -INFINITY)) return -INFINITY;
  if (peak == INFINITY) return x == INFINITY ? static_cast<float>(0.0 - lse) : -INFINITY;
  return static_cast<float>(static_cast<double>(x) - lse);
}

}  // namespace mlaserve::kernels
