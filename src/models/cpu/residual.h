// The residual stream's pieces every CPU model shares: each block's add, and
// the gradient of the token embedding that starts the stream.
#pragma once

#include <cstdint>

namespace mxdp::cpu {

// out = a + b, n floats.
void residual_add(float* out, const float* a, const float* b, int64_t n);
// dtable[tokens[m]] += dx[m] (rows of C floats), m = 0..BT-1 in order. One
// thread: O(BT*C), and rows repeat, so splitting positions would race.
void embedding_backward(float* dtable, const float* dx, const int32_t* tokens, int64_t BT, int C);

}  // namespace mxdp::cpu
