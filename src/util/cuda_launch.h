// Launch sizes shared by the CUDA kernels of every layer.
#pragma once

#include <algorithm>
#include <cstdint>

namespace mxdp {

// Blocks for a grid-stride launch over n items with `threads` threads a block:
// ceil(n / threads), at most max_blocks. The cap is the caller's: a kernel
// whose result depends on its grid (a reduction with one partial per block)
// must keep the cap it was written with; elementwise kernels give the same
// bits for any grid. n <= 0 gives 0 blocks (an invalid launch: guard n first).
inline int64_t grid_blocks(int64_t n, int threads, int64_t max_blocks) {
  return std::min<int64_t>((n + threads - 1) / threads, max_blocks);
}

}  // namespace mxdp
