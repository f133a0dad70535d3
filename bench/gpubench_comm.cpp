// All-gather and reduce-scatter over NCCL on GPU memory (fp32, bf16), 1 MB to
// 4 GB, one process per GPU, timed with CUDA events on the caller stream
// (event -> collective on the comm stream -> caller waits -> event).
//   NCCL_NVLS_ENABLE=0 mpirun -np 2 ./build/bench/gpubench_comm [--max-mb 4096]
#include <cuda_runtime.h>

#include "comm/comm.h"
#include "comm_bench.h"
#include "util/cuda_check.h"

int main(int argc, char** argv) {
  using namespace mxdp;
  try {
    mxdp_bench::SweepConfig cfg;
    cfg.max_bytes = size_t(4096) << 20;
    cfg = mxdp_bench::parse_args(argc, argv, cfg);
    auto c = make_communicator({Backend::Nccl});  // also selects the GPU
    const size_t cap = cfg.max_bytes;
    void *in = nullptr, *out = nullptr;
    MXDP_CUDA_CHECK(cudaMalloc(&in, cap));
    MXDP_CUDA_CHECK(cudaMalloc(&out, cap));
    MXDP_CUDA_CHECK(cudaMemset(in, 0, cap));
    MXDP_CUDA_CHECK(cudaMemset(out, 0, cap));
    cudaStream_t s;
    cudaEvent_t e0, e1;
    MXDP_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    MXDP_CUDA_CHECK(cudaEventCreate(&e0));
    MXDP_CUDA_CHECK(cudaEventCreate(&e1));
    MXDP_CUDA_CHECK(cudaDeviceSynchronize());
    mxdp_bench::sweep(*c, cfg, [&](bool gather, DType t, size_t per_rank) {
      MXDP_CUDA_CHECK(cudaEventRecord(e0, s));
      if (gather)
        c->all_gather(in, out, per_rank * dtype_size(t), s);
      else
        c->reduce_scatter(in, out, per_rank, t, RedOp::Sum, s);
      MXDP_CUDA_CHECK(cudaEventRecord(e1, s));
      MXDP_CUDA_CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      MXDP_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      return double(ms) * 1e3;
    });
    MXDP_CUDA_CHECK(cudaFree(in));
    MXDP_CUDA_CHECK(cudaFree(out));
  } catch (const Error& e) {
    std::fprintf(stderr, "gpubench_comm: %s\n", e.what());
    return 1;
  }
  return 0;
}
