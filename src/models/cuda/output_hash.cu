// output_hash (output_hash.h): a grid-stride sum of mixed words, reduced in
// each warp and added into one 64-bit integer with atomicAdd (integer sums
// wrap the same way in any order).
#include "models/cuda/output_hash.h"

#include "util/check.h"
#include "util/cuda_check.h"
#include "util/cuda_launch.h"
#include "util/splitmix.h"

namespace mxdp::cuda {

namespace {

constexpr int kHashThreads = 256;
constexpr int64_t kHashMaxBlocks = 2048;  // any grid gives the same hash (a wrapping sum)

// Word i of the bytes (little-endian, zero-padded past the end): one 8-byte
// load where p is 8-byte aligned and the word is whole, else byte by byte.
__device__ inline uint64_t word_at(const uint8_t* p, uint64_t i, uint64_t bytes, bool aligned) {
  const uint64_t at = i * 8;
  if (aligned && at + 8 <= bytes) return reinterpret_cast<const uint64_t*>(p)[i];
  uint64_t w = 0;
  for (uint64_t b = at; b < bytes && b < at + 8; ++b) w |= uint64_t(p[b]) << (8 * (b - at));
  return w;
}

__global__ void hash_kernel(const uint8_t* p, uint64_t bytes, bool aligned, unsigned long long* sum) {
  const uint64_t words = (bytes + 7) / 8;
  uint64_t acc = 0;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < words; i += uint64_t(gridDim.x) * blockDim.x)
    acc += splitmix64_mix(word_at(p, i, bytes, aligned) ^ (i * kSplitmix64Gamma));
  for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);  // blockDim: whole warps
  if (threadIdx.x % 32 == 0 && acc != 0) atomicAdd(sum, static_cast<unsigned long long>(acc));
}

// The device sum, given back to the stream's pool on every way out (a throw included).
struct DeviceSum {
  unsigned long long* p = nullptr;
  cudaStream_t s;
  explicit DeviceSum(cudaStream_t stream) : s(stream) { MXDP_CUDA_CHECK(cudaMallocAsync(&p, sizeof *p, s)); }
  ~DeviceSum() { cudaFreeAsync(p, s); }
  DeviceSum(const DeviceSum&) = delete;
  DeviceSum& operator=(const DeviceSum&) = delete;
};

}  // namespace

uint64_t output_hash(const void* p, size_t bytes, cudaStream_t s) {
  const uint64_t length = splitmix64_mix(bytes);
  if (bytes == 0) return length;
  MXDP_CHECK(p != nullptr, "output_hash: a null pointer for ", bytes, " bytes");
  DeviceSum sum(s);
  MXDP_CUDA_CHECK(cudaMemsetAsync(sum.p, 0, sizeof *sum.p, s));
  const int64_t words = int64_t((bytes + 7) / 8);
  const bool aligned = reinterpret_cast<uintptr_t>(p) % 8 == 0;
  hash_kernel<<<unsigned(grid_blocks(words, kHashThreads, kHashMaxBlocks)), kHashThreads, 0, s>>>(
      static_cast<const uint8_t*>(p), bytes, aligned, sum.p);
  MXDP_CUDA_CHECK_LAUNCH();
  unsigned long long h = 0;
  MXDP_CUDA_CHECK(cudaMemcpyAsync(&h, sum.p, sizeof h, cudaMemcpyDeviceToHost, s));
  MXDP_CUDA_CHECK(cudaStreamSynchronize(s));
  return uint64_t(h) + length;
}

}  // namespace mxdp::cuda
