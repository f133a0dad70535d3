// All-gather and reduce-scatter over MPI on host memory (fp32, bf16), 1 MB to
// 256 MB by default (--max-mb): CPU memory bandwidth, not a network, limits
// these, and 4 GB per buffer would not fit sensibly on CI-sized machines.
//   mpirun -np 2 ./build/bench/bench_comm [--max-mb 256] [--iters 10]
#include <chrono>
#include <cstring>
#include <memory>

#include "comm/comm.h"
#include "comm_bench.h"

int main(int argc, char** argv) {
  using namespace mxdp;
  mxdp_bench::SweepConfig cfg;
  cfg.iters = 10;
  cfg = mxdp_bench::parse_args(argc, argv, cfg);
  auto c = make_communicator({Backend::Mpi});
  const size_t cap = cfg.max_bytes;
  std::unique_ptr<char[]> in(new char[cap]), out(new char[cap]);
  std::memset(in.get(), 0, cap);  // zeros: finite sums, pages touched
  std::memset(out.get(), 0, cap);
  const int n = c->size();
  mxdp_bench::sweep(*c, cfg, [&](bool gather, DType t, size_t per_rank) {
    c->barrier();
    const auto t0 = std::chrono::steady_clock::now();
    if (gather)
      c->all_gather(in.get(), out.get(), per_rank * dtype_size(t));
    else
      c->reduce_scatter(in.get(), out.get(), per_rank, t, RedOp::Sum);
    (void)n;
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  });
  return 0;
}
