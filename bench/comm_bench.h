// The collective benchmark sweep shared by bench_comm (MPI, host memory) and
// gpubench_comm (NCCL, GPU memory), printed like nccl-tests:
//   size  = bytes of the whole buffer (all-gather: the gathered output;
//           reduce-scatter: the input), count = its elements,
//   algbw = size / time, busbw = algbw * (n - 1) / n for both collectives,
//   time  = median over the timed iterations (after warm-up), of rank 0.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "comm/comm.h"

namespace mxdp_bench {

struct SweepConfig {
  size_t min_bytes = size_t(1) << 20;
  size_t max_bytes = size_t(256) << 20;
  int warmup = 3;
  int iters = 20;
};

// time_op(is_gather, type, count_per_rank, buffers) -> microseconds of one call.
using TimeFn = std::function<double(bool gather, mxdp::DType t, size_t per_rank_count)>;

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline void sweep(mxdp::Communicator& c, const SweepConfig& cfg, const TimeFn& time_one) {
  using mxdp::DType;
  const int n = c.size();
  if (c.rank() == 0) {
    std::printf("# backend %s, %d ranks, warm-up %d, median of %d iterations\n", mxdp::backend_name(c.backend()), n,
                cfg.warmup, cfg.iters);
    std::printf("# %-15s %13s %12s %6s %11s %12s %12s\n", "op", "size(B)", "count", "type", "time(us)",
                "algbw(GB/s)", "busbw(GB/s)");
  }
  for (bool gather : {true, false})
    for (DType t : {DType::F32, DType::BF16})
      for (size_t bytes = cfg.min_bytes; bytes <= cfg.max_bytes; bytes *= 2) {
        const size_t es = mxdp::dtype_size(t);
        const size_t per_rank = bytes / (es * size_t(n));
        if (per_rank == 0) continue;
        const size_t total = per_rank * size_t(n) * es;
        std::vector<double> us;
        for (int i = 0; i < cfg.warmup + cfg.iters; ++i) {
          double x = time_one(gather, t, per_rank);
          if (i >= cfg.warmup) us.push_back(x);
        }
        const double med = median(us);
        const double algbw = double(total) / (med * 1e-6) / 1e9;
        const double busbw = algbw * double(n - 1) / double(n);
        if (c.rank() == 0)
          std::printf("  %-15s %13zu %12zu %6s %11.1f %12.2f %12.2f\n", gather ? "all_gather" : "reduce_scatter",
                      total, per_rank * size_t(n), mxdp::dtype_name(t), med, algbw, busbw);
        std::fflush(stdout);
      }
}

// --max-mb N, --iters N, --warmup N
inline SweepConfig parse_args(int argc, char** argv, SweepConfig cfg) {
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    const long v = std::atol(argv[i + 1]);
    if (a == "--max-mb") cfg.max_bytes = size_t(v) << 20;
    else if (a == "--min-mb") cfg.min_bytes = size_t(v) << 20;
    else if (a == "--iters") cfg.iters = int(v);
    else if (a == "--warmup") cfg.warmup = int(v);
    else {
      std::fprintf(stderr, "usage: %s [--min-mb N] [--max-mb N] [--iters N] [--warmup N]\n", argv[0]);
      std::exit(2);
    }
  }
  return cfg;
}

}  // namespace mxdp_bench
