// The random numbers of every model's initial weights, on every device: a
// counter-based RNG (splitmix64 + Box-Muller), so that each value depends only
// on (seed, param index, element index), never on the standard library, the
// thread count or the device.
#pragma once

#include <cstdint>

namespace mxdp {

// x[j] = stddev * (normal number j of param p's stream under `seed`) for
// j < n_init, and 0 for n_init <= j < n (rows a model pads with zeros).
void fill_normal(float* x, int64_t n, int64_t n_init, float stddev, uint64_t seed, int p);

}  // namespace mxdp
