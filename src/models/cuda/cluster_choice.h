// ClusterChoice: how the cuBLASLt wrappers (gemm.h's Gemm, fp8_gemm.h's
// Fp8Gemm) choose the thread-block cluster shape of each shape's algorithm;
// cublaslt_plans.h's choose_cluster carries it out.
#pragma once

#include <cstdint>

#include "util/env.h"

namespace mxdp::cuda {

// How a plan's thread-block cluster shape (sm_90: the CTAs that share their
// operand tiles' loads through TMA multicast) is chosen, once the wrapper's
// rule has chosen the algorithm, on the plans whose cluster may move: those
// whose GEMM overwrites its output (an accumulating one's repeated timing
// runs would add up) and whose every cluster shape gives the same bits. A
// cluster changes which CTA loads which operand tile, not a CTA's tile or its
// order along K, and GpuGemmClusters (tests/gputest_fp8_gemm.cu) checks the
// bits of each shape tried on every such plan of both wrappers; it found one
// exception, the bf16 dGELU epilogue under a 4x1 cluster on an H100, so that
// epilogue's plans keep the heuristic's shape. Modes:
//   kFastest: the heuristic's shape and each other one cuBLASLt accepts
//     (cublaslt_plans.h's kClusterShapes), timed on the shape's first call,
//     the fastest kept (the default): the same bits whichever wins;
//   kHeuristic: the heuristic's own everywhere;
//   kFixed: `shape` (a cublasLtClusterShape_t) on every movable plan where
//     cuBLASLt accepts it, else the heuristic's (for tests).
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
