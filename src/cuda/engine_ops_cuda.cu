// Compiled with -fmad=false (src/CMakeLists.txt): adamw_element must round every
// multiply and add on its own to give the host's bits.
#include "cuda/engine_ops_cuda.h"

#include "check.h"
#include "cuda/quant_cuda.h"
#include "cuda_check.h"
#include "formats.h"
#include "optimizer.h"

namespace mxdp::cuda {

namespace {

constexpr int kThreads = 256;
// sum_squares: a fixed grid, so the reduction tree depends on n only.
constexpr int kSumBlocks = 264;

int blocks_for(int64_t n) { return int(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535 * 16)); }

__global__ void to_bf16_kernel(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = codec::bf16_from_f32(x[i]);
}
__global__ void from_bf16_kernel(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = codec::bf16_to_f32(x[i]);
}
__global__ void scale_kernel(float* x, int64_t n, float c) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = x[i] * c;
}
__global__ void adamw_kernel(float* p, float* m, float* v, const float* g, int64_t n, AdamWScalars s) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    adamw_element(p[i], m[i], v[i], g[i], s);
}
// Dequantize straight into bf16 compute weights: bf16_rne(fp32 dequantized
// value), element by element the CPU's to_bf16(dequantize(x)). Each thread
// does 8 consecutive elements (one 16-byte store when aligned).
template <WeightFormat F>
__device__ __forceinline__ float dequant_at(const uint8_t* codes, const uint8_t* scales, int64_t i, float s_dec) {
  if constexpr (F == WeightFormat::Bf16) {
    return codec::bf16_to_f32(reinterpret_cast<const uint16_t*>(codes)[i]);
  } else if constexpr (F == WeightFormat::Mxfp8) {
    return codec::mxfp8_dequant(codes[i], scales[i / kMxfp8Block], Fp8Kind::E4M3);
  } else {
    const uint8_t nib = (codes[i / 2] >> ((i & 1) * 4)) & 0xF;
    return codec::nvfp4_dequant(nib, scales[i / kNvfp4Block], s_dec);
  }
}
template <WeightFormat F, bool kVec>
__global__ void dequant_bf16_kernel(const uint8_t* codes, const uint8_t* scales, int64_t n, float s_dec, uint16_t* y) {
  for (int64_t i0 = 8 * (blockIdx.x * int64_t(blockDim.x) + threadIdx.x); i0 < n; i0 += 8 * int64_t(gridDim.x) * blockDim.x) {
    if (kVec && i0 + 8 <= n) {
      uint16_t v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = codec::bf16_from_f32(dequant_at<F>(codes, scales, i0 + j, s_dec));
      uint4 o;
      o.x = v[0] | (uint32_t(v[1]) << 16);
      o.y = v[2] | (uint32_t(v[3]) << 16);
      o.z = v[4] | (uint32_t(v[5]) << 16);
      o.w = v[6] | (uint32_t(v[7]) << 16);
      *reinterpret_cast<uint4*>(y + i0) = o;
    } else {
      for (int64_t i = i0; i < n && i < i0 + 8; ++i) y[i] = codec::bf16_from_f32(dequant_at<F>(codes, scales, i, s_dec));
    }
  }
}
template <WeightFormat F>
void launch_dequant_bf16(const uint8_t* codes, const uint8_t* scales, int64_t n, float s_dec, uint16_t* y,
                         cudaStream_t st) {
  const int blocks = int(std::min<int64_t>((n + 8 * kThreads - 1) / (8 * kThreads), 65535 * 16));
  if (reinterpret_cast<uintptr_t>(y) % 16 == 0)
    dequant_bf16_kernel<F, true><<<blocks, kThreads, 0, st>>>(codes, scales, n, s_dec, y);
  else
    dequant_bf16_kernel<F, false><<<blocks, kThreads, 0, st>>>(codes, scales, n, s_dec, y);
  MXDP_CUDA_CHECK_LAUNCH();
}

// Pass 1: each block sums a fixed strided subset in fp64 and reduces it in a
// fixed tree; pass 2: one thread adds the block sums in order.
__global__ void sum_squares_blocks(const float* x, int64_t n, double* partial) {
  __shared__ double sh[kThreads];
  double acc = 0;
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n; i += int64_t(kSumBlocks) * kThreads)
    acc += double(x[i]) * double(x[i]);
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (int(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}
__global__ void sum_partials(const double* partial, double* out) {
  double s = 0;
  for (int i = 0; i < kSumBlocks; ++i) s += partial[i];
  *out = s;
}

class CudaOps final : public EngineOps {
 public:
  explicit CudaOps(cudaStream_t s) : stream_(s) {
    if (!stream_) {
      MXDP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      own_stream_ = true;
    }
    MXDP_CUDA_CHECK(cudaMalloc(&scratch_, (kSumBlocks + 1) * sizeof(double) + sizeof(float)));
  }
  ~CudaOps() override {
    cudaStreamSynchronize(stream_);
    cudaFree(scratch_);
    if (own_stream_) cudaStreamDestroy(stream_);
  }
  bool device_memory() const override { return true; }
  void* stream() override { return stream_; }

  void* alloc(size_t bytes) override {
    if (!bytes) return nullptr;
    void* p = nullptr;
    MXDP_CUDA_CHECK(cudaMalloc(&p, bytes));
    MXDP_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
    return p;
  }
  void release(void* p) override {
    if (!p) return;
    MXDP_CUDA_CHECK(cudaStreamSynchronize(stream_));
    MXDP_CUDA_CHECK(cudaFree(p));
  }
  void zero(void* p, size_t bytes) override {
    if (bytes) MXDP_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes) MXDP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  void copy_to_host(void* host, const void* src, size_t bytes) override {
    if (bytes) MXDP_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_));
    MXDP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void copy_from_host(void* dst, const void* host, size_t bytes) override {
    if (!bytes) return;
    MXDP_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_));
    MXDP_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host buffer may go away
  }
  float amax(const float* x, int64_t n) override {
    float* d = reinterpret_cast<float*>(scratch_ + kSumBlocks + 1);
    cuda::amax(x, n, d, stream_);
    float h = 0;
    copy_to_host(&h, d, sizeof h);
    return h;
  }
  void quantize(WeightFormat f, ScaleRounding r, const float* x, int64_t n, float tensor_amax, uint8_t* codes,
                uint8_t* scales) override {
    switch (f) {
      case WeightFormat::Bf16: to_bf16(x, reinterpret_cast<uint16_t*>(codes), n); break;
      case WeightFormat::Mxfp8:
        cuda::mxfp8_quantize_rowwise(x, 1, n, {Fp8Kind::E4M3, r}, codes, scales, stream_);
        break;
      case WeightFormat::Nvfp4: cuda::nvfp4_quantize_rowwise(x, 1, n, tensor_amax, codes, scales, stream_); break;
    }
  }
  void dequantize(WeightFormat f, const uint8_t* codes, const uint8_t* scales, int64_t n, float tensor_amax,
                  void* out, ComputeDType dt) override {
    if (n <= 0) return;
    if (dt == ComputeDType::BF16) {
      uint16_t* y = static_cast<uint16_t*>(out);
      switch (f) {
        case WeightFormat::Bf16: copy(y, codes, size_t(n) * 2); break;
        case WeightFormat::Mxfp8: launch_dequant_bf16<WeightFormat::Mxfp8>(codes, scales, n, 0.f, y, stream_); break;
        case WeightFormat::Nvfp4:
          launch_dequant_bf16<WeightFormat::Nvfp4>(codes, scales, n, mxdp::nvfp4_tensor_scale(tensor_amax).s_dec, y,
                                                   stream_);
          break;
      }
      return;
    }
    float* y = static_cast<float*>(out);
    switch (f) {
      case WeightFormat::Bf16: from_bf16(reinterpret_cast<const uint16_t*>(codes), y, n); break;
      case WeightFormat::Mxfp8: cuda::mxfp8_dequantize_rowwise(codes, scales, 1, n, Fp8Kind::E4M3, y, stream_); break;
      case WeightFormat::Nvfp4:
        cuda::nvfp4_dequantize_rowwise(codes, scales, mxdp::nvfp4_tensor_scale(tensor_amax).s_dec, 1, n, y, stream_);
        break;
    }
  }
  void to_bf16(const float* x, uint16_t* y, int64_t n) override {
    if (n <= 0) return;
    to_bf16_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(x, y, n);
    MXDP_CUDA_CHECK_LAUNCH();
  }
  void from_bf16(const uint16_t* x, float* y, int64_t n) override {
    if (n <= 0) return;
    from_bf16_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(x, y, n);
    MXDP_CUDA_CHECK_LAUNCH();
  }
  void scale(float* x, int64_t n, float c) override {
    if (n <= 0) return;
    scale_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(x, n, c);
    MXDP_CUDA_CHECK_LAUNCH();
  }
  double sum_squares(const float* x, int64_t n) override {
    if (n <= 0) return 0;
    sum_squares_into(x, n, scratch_ + kSumBlocks);
    double h = 0;
    copy_to_host(&h, scratch_ + kSumBlocks, sizeof h);
    return h;
  }
  void sum_squares_into(const float* x, int64_t n, double* out) override {
    if (n <= 0) {
      zero(out, sizeof(double));
      return;
    }
    sum_squares_blocks<<<kSumBlocks, kThreads, 0, stream_>>>(x, n, scratch_);  // stream order protects scratch_
    MXDP_CUDA_CHECK_LAUNCH();
    sum_partials<<<1, 1, 0, stream_>>>(scratch_, out);
    MXDP_CUDA_CHECK_LAUNCH();
  }
  void adamw(float* p, float* m, float* v, const float* g, int64_t n, const AdamWParams& a) override {
    if (n <= 0) return;
    adamw_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(p, m, v, g, n, adamw_scalars(a));
    MXDP_CUDA_CHECK_LAUNCH();
  }

 private:
  cudaStream_t stream_ = nullptr;
  bool own_stream_ = false;
  double* scratch_ = nullptr;  // sum_squares partials + result, then one float for amax
};

}  // namespace

std::unique_ptr<EngineOps> make_cuda_ops(cudaStream_t stream) { return std::make_unique<CudaOps>(stream); }

}  // namespace mxdp::cuda
