// ClusterChoice: how the cuBLASLt wrappers (gemm.h's Gemm, fp8_gemm.h's
// Fp8Gemm) choose the thread-block cluster shape of each shape's algorithm;
// cublaslt_plans.h's choose_cluster carries it out.
#pragma once

#include <cstdint>

#include "util/env.h"

namespace mxdp::cuda {

// How a plan's thread-block cluster shape (sm_90: the CTAs that share their
// operand tiles' loads through TMA multicast) is chosen, once the wrapper's
// rule has chosen the algorithm:
//   kFastest: each shape the heuristic's algorithm accepts, timed on the
//     shape's first call, the fastest kept (the default; not for accumulating
//     GEMMs, whose repeated calls would add up: those keep the heuristic's);
//   kHeuristic: the heuristic's own;
//   kFixed: `shape` (a cublasLtClusterShape_t) where cuBLASLt accepts it for
//     the algorithm, else the heuristic's (for tests)
// A cluster changes which CTA loads what, not any CTA's tile or the order in
// which it adds along K, so every choice gives the same bits
// (GpuGemmClusters in tests/gputest_fp8_gemm.cu checks this for each shape
// of both wrappers); the timed choice keeps a run deterministic.
struct ClusterChoice {
  enum Mode { kFastest, kHeuristic, kFixed } mode = kFastest;
  uint16_t shape = 0;
};

// The wrappers' default: MXDP_GEMM_CLUSTERS=fastest (or unset) or heuristic;
// any other value is an error that says so.
inline ClusterChoice cluster_choice_from_env() {
  return {env_choice("MXDP_GEMM_CLUSTERS", {"fastest", "heuristic"}, "fastest") == "fastest"
              ? ClusterChoice::kFastest
              : ClusterChoice::kHeuristic};
}

}  // namespace mxdp::cuda
