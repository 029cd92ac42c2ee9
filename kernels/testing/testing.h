// Helpers for kernel tests: fresh random inputs, poisoning, relative error.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace mlaserve::kernels::testing {

// A new seed per call, so every run draws fresh inputs; the seed is printed by the test on
// failure through SCOPED_TRACE by the caller.
inline uint64_t FreshSeed() {
  static std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

inline std::vector<float> RandomVector(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

inline void Poison(std::vector<float>& v) {
  for (auto& x : v) x = kPoison;
}

// ||out - ref|| / ||ref||; NaN anywhere in out gives +inf.
inline double RelativeError(const float* out, const float* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(out[i])) return std::numeric_limits<double>::infinity();
    const double d = static_cast<double>(out[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  if (den == 0) return std::sqrt(num);
  return std::sqrt(num / den);
}

inline double RelativeError(const std::vector<float>& out, const std::vector<float>& ref) {
  return RelativeError(out.data(), ref.data(), std::min(out.size(), ref.size()));
}

// Sets (or, with value null, unsets) an environment variable for the scope, then restores it:
// for the A/B switches that the kernels read per call (MLASERVE_...=0).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value != nullptr) setenv(name, value, 1); else unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_, old_.c_str(), 1); else unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

}  // namespace mlaserve::kernels::testing
