// Device arrays for the GPU tests (gputest_gpt, gputest_llama,
// gputest_fp8_gemm, gputest_fp8_format, gpu_fp8_fixtures.h):
//   Dev<T, Fill>  n elements of T in device memory, freed with their owner;
//                 a new array holds the byte Fill everywhere (0xFF: NaN for
//                 floats, what a kernel under test must overwrite);
//   Bf16, F32     bf16 and fp32 arrays filled from and read back as floats;
//   same_bits     whether two arrays hold the same bits;
//   Stream        a non-blocking stream, as the models and kernels run on.
//
// Every copy in and out synchronizes the device. A cudaMemcpy from pageable
// memory may return before its DMA has landed, and the kernels run on
// non-blocking streams that do not wait for the legacy one: without the
// synchronize a kernel can read the fill instead of the data (as
// GpuLlamaKernels.RopeForwardAndInverseMatchCpu once did on an H100).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "formats/codec.h"
#include "util/check.h"
#include "util/cuda_check.h"

namespace mxdp::gputest {

template <class T, int Fill = 0xFF>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) {
    MXDP_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
    MXDP_CUDA_CHECK(cudaMemset(p, Fill, std::max<size_t>(n, 1) * sizeof(T)));
    MXDP_CUDA_CHECK(cudaDeviceSynchronize());  // the fill lands before any kernel's stream writes p
  }
  explicit Dev(const std::vector<T>& v) : Dev(v.size()) { put(v); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;

  // Copies v to the front of the array.
  void put(const std::vector<T>& v) {
    MXDP_CHECK(v.size() <= n, "test: ", v.size(), " values into a device array of ", n);
    MXDP_CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    MXDP_CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::vector<T> get() const {
    MXDP_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> h(n);
    MXDP_CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  std::vector<uint8_t> bytes() const {
    MXDP_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint8_t> h(n * sizeof(T));
    MXDP_CUDA_CHECK(cudaMemcpy(h.data(), p, h.size(), cudaMemcpyDeviceToHost));
    return h;
  }
};

// Whether two device arrays hold the same bits (floats compared as bits: -0, NaN).
template <class T, int F>
bool same_bits(const Dev<T, F>& a, const Dev<T, F>& b) {
  return a.n == b.n && a.bytes() == b.bytes();
}

// bf16 values, written from floats (rounded to nearest even) and read back as floats.
struct Bf16 : Dev<uint16_t> {
  explicit Bf16(size_t count) : Dev<uint16_t>(count) {}
  explicit Bf16(const std::vector<float>& v) : Dev<uint16_t>(v.size()) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = codec::bf16_from_f32(v[i]);
    put(h);
  }
  std::vector<float> get() const {
    const std::vector<uint16_t> h = Dev<uint16_t>::get();
    std::vector<float> f(h.size());
    for (size_t i = 0; i < h.size(); ++i) f[i] = codec::bf16_to_f32(h[i]);
    return f;
  }
};
using F32 = Dev<float>;

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { MXDP_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() {
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

}  // namespace mxdp::gputest
