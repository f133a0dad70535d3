// act_quantize (fp8_linear.cu) against the device copy bandwidth, one GPU,
// same run: for gpt2-124m at 16384 tokens and gpt2-774m at 8192, each call the
// GPT-2 FP8 path makes (gpt_cuda.cu's forward_block_fp8 / backward_block_fp8,
// and Fp8Linear::fprop's bias pass where cuBLASLt has no bias epilogue), and
// those it made before the forward made the inputs' X^T. Outputs go to buffers
// of their own (the model writes biased / out in place: the same bytes, but
// repeated calls would compound the values).
// One JSON line per measurement:
//   {"what": "copy", ...}: cudaMemcpyAsync device to device, read + write bytes / s;
//   {"what": "act_quantize", "model", "M", "N", "call", "ms", "bytes", "gb_s", "of_copy"}:
//     bytes = what the call must read and write (x, aux, biased, out, codes, scales; with
//     column sums, the tiles' partial sums written, read back by bias_backward_finish, and
//     the [N] destination read and written: ms includes that second kernel);
//   {"what": "block", "model", "M", "path", "ms", "floor_ms", "of_floor"}: one block's
//     act_quantize calls (not the bias fallback) and the copy-bandwidth floor over them, for
//     path "now" (the forward makes the inputs' X^T: 4 forward, 4 backward; ln1's and ln2's
//     operands from the LayerNorm's input, mean and rstd) and "before" (the forward made rows
//     only from the bf16 LayerNorm outputs, backward the X^T again: 4 forward, 7 backward).
//     "now" also adds fc's and qkv's bias gradients (column sums) in the calls that quantize
//     their dY, and fc's dY is no longer written in bf16 ("before": written, and summed by
//     bias_backward). The LayerNorm kernels' share (writing ln1 and ln2 before, not now) and
//     the bias_backward launches the sums replace are not timed here.
//
//   gpubench_act_quantize [reps=20]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "formats/codec.h"
#include "models/cuda/column_sums.h"  // colsum_scratch_floats
#include "models/cuda/fp8_linear.h"
#include "models/gpt2/gpt.h"
#include "util/cuda_check.h"
#include "gpu_timing.h"

using namespace mxdp;

namespace {

uint16_t* bf16_randn(size_t n, uint64_t seed, float scale) {
  std::vector<uint16_t> h(n);
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.f, scale);
  for (auto& x : h) x = codec::bf16_from_f32(d(g));
  uint16_t* p = nullptr;
  MXDP_CUDA_CHECK(cudaMalloc(&p, n * 2));
  MXDP_CUDA_CHECK(cudaMemcpy(p, h.data(), n * 2, cudaMemcpyHostToDevice));
  return p;
}
template <class T>
T* dev_zero(size_t n) {
  T* p = nullptr;
  MXDP_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
  MXDP_CUDA_CHECK(cudaMemset(p, 0, n * sizeof(T)));
  return p;
}


// One call of the FP8 path: width in units of d_model, and how often a block
// makes it, now and before the forward made the inputs' X^T (docs/fp8_history.md,
// "The X^T operands made in the forward").
struct Call {
  const char* name;
  int width;  // N = width * d_model
  cuda::ActOp op;
  bool bias, rows, cols, out, sums;  // sums: the column sums (the bias gradient of the dY)
  int per_block[2];  // now, before
};
const char* const kPaths[2] = {"now", "before"};
const Call kCalls[] = {
    {"layernorm+rows+cols (ln1, ln2 + X^T)", 1, cuda::ActOp::LayerNorm, false, true, true, false, false, {2, 0}},
    {"rows+cols (atty + X^T; dresid)", 1, cuda::ActOp::Identity, false, true, true, false, false, {3, 2}},
    {"gelu+rows+cols (fc + h^T, its bias from the GEMM's epilogue)", 4, cuda::ActOp::Gelu, false, true, true, false,
     false, {1, 0}},
    {"bias+gelu+rows+cols (fc + h^T without a bias epilogue)", 4, cuda::ActOp::Gelu, true, true, true, false, false,
     {0, 0}},
    {"rows+cols+sums (dqkv + qkv's bias gradient)", 3, cuda::ActOp::Identity, false, true, true, false, true, {1, 0}},
    {"dgelu+rows+cols+sums (fc's dY + fc's bias gradient)", 4, cuda::ActOp::GeluGrad, false, true, true, false, true,
     {1, 0}},
    {"rows+cols (dqkv; before)", 3, cuda::ActOp::Identity, false, true, true, false, false, {0, 1}},
    {"dgelu+rows+cols, out (fc's dY; before)", 4, cuda::ActOp::GeluGrad, false, true, true, true, false, {0, 1}},
    {"rows (ln1, atty, ln2; before)", 1, cuda::ActOp::Identity, false, true, false, false, false, {0, 3}},
    {"bias+gelu+rows (fc; before)", 4, cuda::ActOp::Gelu, true, true, false, false, false, {0, 1}},
    {"gelu+cols (gelu(pre)^T; before)", 4, cuda::ActOp::Gelu, false, false, true, false, false, {0, 1}},
    {"cols (ln1, atty, ln2)^T; before", 1, cuda::ActOp::Identity, false, false, true, false, false, {0, 3}},
    {"bias (fprop fallback, qkv)", 3, cuda::ActOp::Identity, true, false, false, false, false, {0, 0}},
    {"bias (fprop fallback, fc)", 4, cuda::ActOp::Identity, true, false, false, false, false, {0, 0}},
};

// Bytes a call must move: x (and aux, or the LayerNorm's statistics, weight and
// bias) read; biased, out, codes and scales written; the column sums' partial
// sums (a float per column and 128 rows) written and read back, and their [N]
// destination read and written.
double call_bytes(const Call& c, int64_t M, int64_t N) {
  const double e = double(M) * N, ep = double(cuda::fp8_rows_padded(M)) * N;
  double b = 2 * e;                                  // x
  if (c.op == cuda::ActOp::GeluGrad) b += 2 * e;     // aux
  if (c.op == cuda::ActOp::LayerNorm) b += 8.0 * M + 4.0 * N;  // mean, rstd; w, b
  if (c.bias) b += 2 * e + 2 * N;                    // biased, bias
  if (c.out) b += 2 * e;                             // out
  b += (int(c.rows) + int(c.cols)) * (ep + ep / 32);  // codes, a 4-byte scale per 128
  if (c.sums) b += 2 * (ep / 32) + 8.0 * N;            // partial sums written and read; dst
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  try {
    cudaStream_t s;
    MXDP_CUDA_CHECK(cudaStreamCreate(&s));
    struct Shape {
      const char* model;
      int M;
    };
    const Shape shapes[] = {{"gpt2-124m", 16384}, {"gpt2-774m", 8192}};
    size_t big = 0;  // the largest [M, 4C]
    size_t rows = 0;  // the largest M
    size_t wide = 0;  // the largest 4C
    for (const Shape& sh : shapes) {
      big = std::max(big, size_t(sh.M) * 4 * gpt_config(sh.model).d_model);
      rows = std::max(rows, size_t(sh.M));
      wide = std::max(wide, size_t(4) * gpt_config(sh.model).d_model);
    }
    uint16_t *x = bf16_randn(big, 1, 2.f), *aux = bf16_randn(big, 2, 1.f), *bias = bf16_randn(4 * 1280, 3, 1.f);
    uint16_t *biased = dev_zero<uint16_t>(big), *out = dev_zero<uint16_t>(big);
    // The LayerNorm op's statistics: mean 0 and rstd 1 for every row (its values are x w + b).
    float *mean = dev_zero<float>(rows), *rstd = dev_zero<float>(rows);
    const std::vector<float> ones(rows, 1.f);
    MXDP_CUDA_CHECK(cudaMemcpy(rstd, ones.data(), rows * sizeof(float), cudaMemcpyHostToDevice));
    uint8_t *rc = dev_zero<uint8_t>(big), *cc = dev_zero<uint8_t>(big);
    float *rs = dev_zero<float>(big / 128), *cs = dev_zero<float>(big / 128);
    // The column sums' destination and bias_backward's scratch (zeroed: its counters).
    float* sums = dev_zero<float>(wide);
    float* scratch = dev_zero<float>(size_t(cuda::colsum_scratch_floats(int64_t(rows), int64_t(wide))));
    // Copy bandwidth (read + write bytes / s) over buffers of the same size.
    const double copy_ms = bench::best_window_ms(s, reps, [&] {
      MXDP_CUDA_CHECK(cudaMemcpyAsync(out, x, big * 2, cudaMemcpyDeviceToDevice, s));
    });
    const double copy_gbs = 2.0 * big * 2 / (copy_ms * 1e-3) / 1e9;
    std::printf("{\"what\": \"copy\", \"bytes\": %zu, \"ms\": %.4f, \"gb_s\": %.0f}\n", big * 4, copy_ms, copy_gbs);
    for (const Shape& sh : shapes) {
      const int C = gpt_config(sh.model).d_model, M = sh.M;
      double block_ms[2] = {0, 0}, block_bytes[2] = {0, 0};
      for (const Call& c : kCalls) {
        const int N = c.width * C;
        const cuda::ActQuant q{.x = x, .bias = c.bias ? bias : nullptr, .biased = c.bias ? biased : nullptr,
                               .op = c.op, .aux = aux, .norm = {mean, rstd, bias, bias}, .out = c.out ? out : nullptr,
                               .rows = {c.rows ? rc : nullptr, rs}, .cols = {c.cols ? cc : nullptr, cs},
                               .sums = {c.sums ? sums : nullptr, scratch}};
        const double bytes = call_bytes(c, M, N);
        const double ms = bench::best_window_ms(s, reps, [&] { cuda::act_quantize(q, M, N, s); });
        for (int p = 0; p < 2; ++p) {
          block_bytes[p] += c.per_block[p] * bytes;
          block_ms[p] += c.per_block[p] * ms;
        }
        const double gbs = bytes / (ms * 1e-3) / 1e9;
        std::printf("{\"what\": \"act_quantize\", \"model\": \"%s\", \"M\": %d, \"N\": %d, \"call\": \"%s\", "
                    "\"ms\": %.4f, \"bytes\": %.0f, \"gb_s\": %.0f, \"of_copy\": %.3f}\n",
                    sh.model, M, N, c.name, ms, bytes, gbs, gbs / copy_gbs);
      }
      for (int p = 0; p < 2; ++p) {
        const double floor_ms = block_bytes[p] / (copy_gbs * 1e9) * 1e3;
        std::printf("{\"what\": \"block\", \"model\": \"%s\", \"M\": %d, \"path\": \"%s\", \"ms\": %.4f, "
                    "\"floor_ms\": %.4f, \"of_floor\": %.3f}\n",
                    sh.model, M, kPaths[p], block_ms[p], floor_ms, floor_ms / block_ms[p]);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpubench_act_quantize: %s\n", e.what());
    return 1;
  }
  return 0;
}
