// The CPU models' residual-stream loops (declared in residual.h).
#include "models/cpu/residual.h"

#include "models/cpu/parallel.h"

namespace mxdp::cpu {

void residual_add(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void embedding_backward(float* dtable, const float* dx, const int32_t* tokens, int64_t BT, int C) {
  for (int64_t m = 0; m < BT; ++m) {
    float* o = dtable + int64_t(tokens[m]) * C;
    const float* d = dx + m * C;
    for (int i = 0; i < C; ++i) o[i] += d[i];
  }
}

}  // namespace mxdp::cpu
