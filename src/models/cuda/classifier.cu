// Kernels behind classifier.h: the fused classifier (classifier_kernel, one
// block per row, with its (max, sum) combine and its access order,
// for_each_access) and mean_loss_kernel. Moved here from gpt_kernels.cu
// unchanged (the same expressions in the same order, the same launch shapes).
#include "models/cuda/classifier.h"

#include "formats/codec.h"
#include "models/cuda/bf16_vectors.cuh"
#include "models/cuda/model_kernels.cuh"  // ld, aligned16
#include "util/cuda_check.h"

namespace mxdp::cuda {

namespace {

using device::ld;
using device::load_raw;
using device::RawBf16;
using device::store;
using device::unpack;

struct MaxSum {
  float m, s;
};
// Commutative (bitwise): max is symmetric and the two products are added once.
__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

constexpr int kClsThreads = 512;
constexpr int kClsUnroll = 4;  // accesses each thread has in flight

// A thread's accesses of a row below `limit` logits, k = tid, tid + kClsThreads,
// ... in that order, kClsUnroll of them loaded before the first is converted:
// fn(k, f) gets access k's W logits as floats.
template <int W, class Fn>
__device__ __forceinline__ void for_each_access(const uint16_t* z, int limit, Fn&& fn) {
  for (int k0 = threadIdx.x; k0 * W < limit; k0 += kClsUnroll * kClsThreads) {
    RawBf16<W> r[kClsUnroll];
#pragma unroll
    for (int u = 0; u < kClsUnroll; ++u)
      if (const int k = k0 + u * kClsThreads; k * W < limit) r[u] = load_raw<W>(z + k * W);
#pragma unroll
    for (int u = 0; u < kClsUnroll; ++u) {
      const int k = k0 + u * kClsThreads;
      if (k * W >= limit) break;
      float f[W];
      unpack(r[u], f);
      fn(k, f);
    }
  }
}

// One block per row, W logits per access (W = 8 when Vp % 8 == 0). Each
// thread keeps a running max and a sum rescaled when the max grows (one exp
// per logit, one more per access at most), then the block combines them in a
// fixed tree. for_each_access visits a thread's accesses in a fixed order, so
// the sums do not depend on the unroll.
// Pass two reads the row again: keeping the row (100 KB at GPT-2's vocab) in
// shared memory between the passes was slower (docs/gpu.md), and so was a grid
// of only as many blocks as rows fit in L2, each looping over rows (so that
// pass two would read from L2): 6.57 ms against 4.36 at Qwen2.5's vocab.
template <int W>
__global__ void classifier_kernel(uint16_t* logits, float* losses, const int32_t* targets, int V, int Vp,
                                  float grad_scale, bool write_grad) {
  __shared__ MaxSum warps[kClsThreads / 32];
  __shared__ float lse_sh;
  const int64_t row = blockIdx.x;
  uint16_t* z = logits + row * Vp;
  float mx = -INFINITY, sum = 0.f;
  for_each_access<W>(z, V, [&](int k, float (&f)[W]) {
    float cm = -INFINITY;  // the access's max first, so the sum rescales at most once per access
#pragma unroll
    for (int i = 0; i < W; ++i) cm = k * W + i < V ? fmaxf(cm, f[i]) : cm;
    if (cm > mx) {
      sum *= expf(mx - cm);
      mx = cm;
    }
#pragma unroll
    for (int i = 0; i < W; ++i) sum += k * W + i < V ? expf(f[i] - mx) : 0.f;
  });
  MaxSum acc{mx, sum};
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, acc.m, o), __shfl_xor_sync(0xffffffffu, acc.s, o)};
    acc = combine(acc, other);
  }
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    MaxSum t = warps[0];
    for (int w = 1; w < kClsThreads / 32; ++w) t = combine(t, warps[w]);
    lse_sh = t.m + logf(t.s);
    losses[row] = lse_sh - ld(z, targets[row]);
  }
  __syncthreads();
  if (!write_grad) return;
  const float lse = lse_sh;
  const int target = targets[row];
  for_each_access<W>(z, Vp, [&](int k, float (&f)[W]) {
#pragma unroll
    for (int i = 0; i < W; ++i) {
      const int v = k * W + i;
      f[i] = v < V ? (expf(f[i] - lse) - (v == target ? 1.f : 0.f)) * grad_scale : 0.f;
    }
    store(z + k * W, f);
  });
}

__global__ void mean_loss_kernel(const float* x, int n, float* out) {
  __shared__ double sh[1024];
  double s = 0;
  for (int i = threadIdx.x; i < n; i += 1024) s += double(x[i]);
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = 512; w > 0; w /= 2) {
    if (int(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = float(sh[0] / double(n));
}

}  // namespace

void classifier(uint16_t* logits, float* losses, const int32_t* targets, int M, int V, int Vp, float grad_scale,
                bool write_grad, cudaStream_t s) {
  if (Vp % 8 == 0 && aligned16(logits))
    classifier_kernel<8><<<M, kClsThreads, 0, s>>>(logits, losses, targets, V, Vp, grad_scale, write_grad);
  else
    classifier_kernel<1><<<M, kClsThreads, 0, s>>>(logits, losses, targets, V, Vp, grad_scale, write_grad);
  MXDP_CUDA_CHECK_LAUNCH();
}

void mean_loss(const float* x, int n, float* out, cudaStream_t s) {
  mean_loss_kernel<<<1, 1024, 0, s>>>(x, n, out);
  MXDP_CUDA_CHECK_LAUNCH();
}

}  // namespace mxdp::cuda
