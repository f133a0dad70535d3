// ClusterChoice: how the cuBLASLt wrappers (fp8_gemm.h's Fp8Gemm, gemm.h's
// Gemm) choose the thread-block cluster shape of each shape's algorithm;
// cublaslt_plans.h's choose_cluster carries it out.
#pragma once

#include <cstdint>

#include "util/env.h"

namespace mxdp::cuda {

// How a plan's thread-block cluster shape (sm_90: the CTAs that share their
// operand tiles' loads through TMA multicast) is chosen, once the wrapper's
// rule has chosen the algorithm, on the plans whose cluster may move: those
// whose GEMM overwrites its outputs (an accumulating one's repeated timing
// runs would add up). A shape is kept only with the heuristic's bits: each
// candidate's outputs are hashed (output_hash.h) against the heuristic's on
// the call's own operands, and one that differs is refused, whatever its
// speed. A cluster changes which CTA loads which operand tile, not a CTA's
// tile or its order along K, so the bits should not move, and GpuGemmClusters
// (tests/gputest_fp8_gemm.cu) compares each shape's outputs byte for byte on
// every such plan of both wrappers at GPT-2 1558M's linears. It found one
// exception, the bf16 dGELU epilogue under a 4x1 cluster on an H100
// (cuBLASLt's older kernel family): before the hash check, that epilogue's
// plans were pinned and the bf16 Gemm kept kHeuristic, since its kernels come
// from several families the test's shapes need not cover. With the check the
// rule is one for both wrappers, which take MXDP_GEMM_CLUSTERS' mode (below).
// Modes:
//   kFastest: the heuristic's shape and each other one cuBLASLt accepts
//     (cublaslt_plans.h's kClusterShapes), timed on the shape's first call;
//     the fastest with the heuristic's bits is kept;
//   kHeuristic: the heuristic's own everywhere;
//   kFixed: `shape` (a cublasLtClusterShape_t) on every movable plan where
//     cuBLASLt accepts it and it gives the heuristic's bits, else the
//     heuristic's (for tests).
struct ClusterChoice {
  enum Mode { kFastest, kHeuristic, kFixed } mode = kFastest;
  uint16_t shape = 0;
};

// Both wrappers' default: MXDP_GEMM_CLUSTERS=fastest (or unset) or heuristic; any
// other value is an error that says so.
inline ClusterChoice cluster_choice_from_env() {
  return {env_choice("MXDP_GEMM_CLUSTERS", {"fastest", "heuristic"}, "fastest") == "fastest"
              ? ClusterChoice::kFastest
              : ClusterChoice::kHeuristic};
}

}  // namespace mxdp::cuda
