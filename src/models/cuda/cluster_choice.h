// ClusterChoice: how the cuBLASLt wrappers (fp8_gemm.h's Fp8Gemm, and gemm.h's
// Gemm when told) choose the thread-block cluster shape of each shape's
// algorithm; cublaslt_plans.h's choose_cluster carries it out.
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
// bits of each shape tried on every such plan of both wrappers at GPT-2
// 1558M's linears. It found one exception, the bf16 dGELU epilogue under a
// 4x1 cluster on an H100 (cuBLASLt's older kernel family): that epilogue's
// plans never move, and the bf16 Gemm keeps kHeuristic unless told, since
// its kernels come from several families the test's shapes need not cover.
// The block-scaled FP8 GEMMs are one algorithm: in the sweeps of 1558M's
// GEMMs (bench/gpubench_fp8_algos) every heuristic answer and every
// configuration cuBLASLt accepted, of its 12 FP8 algorithm ids, was id 66.
// So Fp8Gemm takes MXDP_GEMM_CLUSTERS' mode (below). Modes:
//   kFastest: the heuristic's shape and each other one cuBLASLt accepts
//     (cublaslt_plans.h's kClusterShapes), timed on the shape's first call,
//     the fastest kept: the same bits whichever wins;
//   kHeuristic: the heuristic's own everywhere;
//   kFixed: `shape` (a cublasLtClusterShape_t) on every movable plan where
//     cuBLASLt accepts it, else the heuristic's (for tests).
struct ClusterChoice {
  enum Mode { kFastest, kHeuristic, kFixed } mode = kFastest;
  uint16_t shape = 0;
};

// Fp8Gemm's default: MXDP_GEMM_CLUSTERS=fastest (or unset) or heuristic; any
// other value is an error that says so.
inline ClusterChoice cluster_choice_from_env() {
  return {env_choice("MXDP_GEMM_CLUSTERS", {"fastest", "heuristic"}, "fastest") == "fastest"
              ? ClusterChoice::kFastest
              : ClusterChoice::kHeuristic};
}

}  // namespace mxdp::cuda
