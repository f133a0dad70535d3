// Device helpers of the NCCL backend: the Avg division (see comm_nccl.h).
#include <cuda_bf16.h>

#include "comm/cuda/comm_nccl.h"
#include "util/cuda_check.h"
#include "util/cuda_launch.h"

namespace mxdp::comm_detail {
namespace {

template <class T>
__global__ void divide_kernel(T* buf, size_t count, T d) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    buf[i] = buf[i] / d;  // IEEE division: no fast math in this project
}

__global__ void divide_bf16_kernel(__nv_bfloat16* buf, size_t count, float d) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    buf[i] = __float2bfloat16_rn(__bfloat162float(buf[i]) / d);
}

}  // namespace

void launch_divide(void* buf, size_t count, DType t, int n, cudaStream_t stream) {
  if (count == 0) return;
  const int threads = 256;
  const int blocks = int(grid_blocks(int64_t(count), threads, 4096));
  switch (t) {
    case DType::F32: divide_kernel<<<blocks, threads, 0, stream>>>(static_cast<float*>(buf), count, float(n)); break;
    case DType::F64: divide_kernel<<<blocks, threads, 0, stream>>>(static_cast<double*>(buf), count, double(n)); break;
    case DType::BF16:
      divide_bf16_kernel<<<blocks, threads, 0, stream>>>(static_cast<__nv_bfloat16*>(buf), count, float(n));
      break;
    default: MXDP_FAIL("Avg is not defined for ", dtype_name(t));
  }
  MXDP_CUDA_CHECK_LAUNCH();
}

}  // namespace mxdp::comm_detail
