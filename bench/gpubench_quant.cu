// Bandwidth of the block-format kernels against a device-to-device copy timed
// in the same run. GB/s counts the bytes each kernel must move (read + write):
//   copy            : 2 * 4n               (fp32 in, fp32 out)
//   MXFP8 quantize  : 4n + n + n/32        (fp32 in; codes + E8M0 scales out)
//   MXFP8 dequantize: n + n/32 + 4n
//   NVFP4 quantize  : 4n + n/2 + n/16
//   NVFP4 dequantize: n/2 + n/16 + 4n
//   fp8b128 quantize: 4n + n + 4n/16384  (128x128 tiles, fp32 scales)
//   fp8b128 transpose: 2n                (codes in and out; the scales are 1/4096 of that)
// Each row: 5 warm-up launches, then the median of `reps` launches each timed
// with CUDA events. The working set (>= 1.3 GB) is ~25x the L2, so no flush is
// needed between repetitions.
//
//   gpubench_quant [elements (default 2^28)] [reps (default 50)]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "formats/cuda/fp8_block_cuda.h"
#include "formats/cuda/quant_cuda.h"
#include "util/cuda_check.h"
#include "formats/quant.h"

namespace {

using namespace mxdp;

__global__ void fill(float* x, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    // Deterministic pseudo-random values spanning many binades, a few specials-free.
    uint32_t h = uint32_t(i) * 2654435761u;
    h ^= h >> 15;
    const float m = float(h & 0xFFFF) / 65536.0f - 0.5f;
    x[i] = ldexpf(m, int((h >> 16) % 24) - 12);
  }
}

double median_ms(const std::function<void()>& fn, int reps) {
  cudaEvent_t a, b;
  MXDP_CUDA_CHECK(cudaEventCreate(&a));
  MXDP_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 5; ++i) fn();
  MXDP_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> t(reps);
  for (int i = 0; i < reps; ++i) {
    MXDP_CUDA_CHECK(cudaEventRecord(a));
    fn();
    MXDP_CUDA_CHECK(cudaEventRecord(b));
    MXDP_CUDA_CHECK(cudaEventSynchronize(b));
    MXDP_CUDA_CHECK(cudaEventElapsedTime(&t[i], a, b));
  }
  MXDP_CUDA_CHECK(cudaEventDestroy(a));
  MXDP_CUDA_CHECK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[reps / 2];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int64_t n = argc > 1 ? std::atoll(argv[1]) : (int64_t(1) << 28);
    const int reps = argc > 2 ? std::atoi(argv[2]) : 50;
    MXDP_CHECK(n > 0 && n % 4096 == 0 && reps > 0, "usage: gpubench_quant [elements, multiple of 4096] [reps]");
    const int64_t cols = 4096, rows = n / cols;
    cudaDeviceProp prop;
    MXDP_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s, %d SMs; n = %lld elements (%lld x %lld), median of %d reps\n", prop.name,
                prop.multiProcessorCount, (long long)n, (long long)rows, (long long)cols, reps);

    float *x, *y;
    uint8_t *codes, *scales;
    MXDP_CUDA_CHECK(cudaMalloc(&x, n * 4));
    MXDP_CUDA_CHECK(cudaMalloc(&y, n * 4));
    MXDP_CUDA_CHECK(cudaMalloc(&codes, n));
    MXDP_CUDA_CHECK(cudaMalloc(&scales, n / 16));
    uint8_t* codes_t;
    float* scales_t;
    MXDP_CUDA_CHECK(cudaMalloc(&codes_t, n));
    MXDP_CUDA_CHECK(cudaMalloc(&scales_t, n / 4096));
    fill<<<4096, 256>>>(x, n);
    MXDP_CUDA_CHECK_LAUNCH();
    float* d_amax;
    MXDP_CUDA_CHECK(cudaMalloc(&d_amax, 4));
    cuda::amax(x, n, d_amax, 0);
    float h_amax = 0;
    MXDP_CUDA_CHECK(cudaMemcpy(&h_amax, d_amax, 4, cudaMemcpyDeviceToHost));
    const float s_dec = nvfp4_tensor_scale(h_amax).s_dec;

    struct Row {
      std::string name;
      double bytes;
      std::function<void()> fn;
    };
    const double N = double(n);
    using cuda::detail::Fp8Encoder;
    const Mxfp8Config e4_rceil{Fp8Kind::E4M3, ScaleRounding::RCeil};
    std::vector<Row> rows_out = {
        {"cudaMemcpy D2D (fp32)", 8 * N, [&] { MXDP_CUDA_CHECK(cudaMemcpyAsync(y, x, n * 4, cudaMemcpyDeviceToDevice, 0)); }},
        {"MXFP8 E4M3 rceil quantize", 5 * N + N / 32,
         [&] { cuda::mxfp8_quantize_rowwise(x, rows, cols, e4_rceil, codes, scales, 0); }},
        {"  (integer encoder)", 5 * N + N / 32,
         [&] { cuda::detail::mxfp8_quantize_rowwise(x, rows, cols, e4_rceil, codes, scales, Fp8Encoder::Integer, 0); }},
        {"  (hardware cvt encoder)", 5 * N + N / 32,
         [&] { cuda::detail::mxfp8_quantize_rowwise(x, rows, cols, e4_rceil, codes, scales, Fp8Encoder::Hardware, 0); }},
        {"MXFP8 E4M3 dequantize", 5 * N + N / 32,
         [&] { cuda::mxfp8_dequantize_rowwise(codes, scales, rows, cols, Fp8Kind::E4M3, y, 0); }},
        {"MXFP8 E4M3 colwise quantize", 5 * N + N / 32,
         [&] { cuda::mxfp8_quantize_colwise(x, rows, cols, e4_rceil, codes, scales, 0); }},
        {"NVFP4 quantize", 4.5 * N + N / 16,
         [&] { cuda::nvfp4_quantize_rowwise(x, rows, cols, h_amax, codes, scales, 0); }},
        {"NVFP4 dequantize", 4.5 * N + N / 16,
         [&] { cuda::nvfp4_dequantize_rowwise(codes, scales, s_dec, rows, cols, y, 0); }},
        {"amax (fp32 read)", 4 * N, [&] { cuda::amax(x, n, d_amax, 0); }},
        // The engine's two fp8b128 passes over every weight each step (the stage, W^T).
        {"fp8b128 quantize", 5 * N + N / 4096,
         [&] { cuda::fp8b128_quantize(x, rows, cols, codes, reinterpret_cast<float*>(scales), 0); }},
        {"  (scalar kernel)", 5 * N + N / 4096,
         [&] {
           cuda::detail::fp8b128_quantize(x, rows, cols, codes, reinterpret_cast<float*>(scales),
                                          cuda::detail::Fp8b128Kernel::Scalar, 0);
         }},
        {"fp8b128 transpose", 2 * N,
         [&] { cuda::fp8b128_transpose(codes, reinterpret_cast<float*>(scales), rows, cols, codes_t, scales_t, 0); }},
        {"  (scalar kernel)", 2 * N,
         [&] {
           cuda::detail::fp8b128_transpose(codes, reinterpret_cast<float*>(scales), rows, cols, codes_t, scales_t,
                                           cuda::detail::Fp8b128Kernel::Scalar, 0);
         }},
    };
    std::printf("%-30s %12s %10s %10s %9s\n", "kernel", "bytes moved", "median ms", "GB/s", "vs copy");
    double copy_gbs = 0;
    for (const Row& r : rows_out) {
      // The MXFP8 dequantize row reads codes written by the row before it
      // (NVFP4 dequantize likewise): keep the table order.
      const double ms = median_ms(r.fn, reps);
      const double gbs = r.bytes / (ms * 1e-3) / 1e9;
      if (copy_gbs == 0) copy_gbs = gbs;
      std::printf("%-30s %12.3e %10.4f %10.1f %8.2fx\n", r.name.c_str(), r.bytes, ms, gbs, gbs / copy_gbs);
    }
    MXDP_CUDA_CHECK(cudaFree(x));
    MXDP_CUDA_CHECK(cudaFree(y));
    MXDP_CUDA_CHECK(cudaFree(codes));
    MXDP_CUDA_CHECK(cudaFree(scales));
    MXDP_CUDA_CHECK(cudaFree(codes_t));
    MXDP_CUDA_CHECK(cudaFree(scales_t));
    MXDP_CUDA_CHECK(cudaFree(d_amax));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpubench_quant: %s\n", e.what());
    return 1;
  }
}
