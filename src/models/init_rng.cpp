// The initial weights' RNG (declared in init_rng.h).
#include "models/init_rng.h"

#include <cmath>
#include <numbers>

#include "models/cpu/parallel.h"
#include "util/splitmix.h"

namespace mxdp {

namespace {

uint64_t splitmix64(uint64_t x) { return splitmix64_mix(x + kSplitmix64Gamma); }

// Standard normal number j of stream `key`: Box-Muller on the pair j/2, whose
// two uniforms come from splitmix64 of consecutive counters.
float normal_at(uint64_t key, uint64_t j) {
  const uint64_t c = key + 2 * (j / 2);
  const double u1 = double((splitmix64(c) >> 11) + 1) * 0x1p-53;  // (0, 1]
  const double u2 = double(splitmix64(c + 1) >> 11) * 0x1p-53;    // [0, 1)
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double th = 2.0 * std::numbers::pi * u2;
  return float(j % 2 ? r * std::sin(th) : r * std::cos(th));
}

}  // namespace

void fill_normal(float* x, int64_t n, int64_t n_init, float stddev, uint64_t seed, int p) {
  const uint64_t key = splitmix64(seed ^ splitmix64(uint64_t(p) + 1));
#pragma omp parallel for schedule(static) if (n >= cpu::kParallelMinWork)
  for (int64_t j = 0; j < n; ++j) x[j] = j < n_init ? stddev * normal_at(key, uint64_t(j)) : 0.f;
}

}  // namespace mxdp
