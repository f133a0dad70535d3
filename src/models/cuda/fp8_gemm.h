// Block-scaled FP8 GEMMs on Hopper through cuBLASLt (CUDA 12.9+, sm_90):
// E4M3 (or E5M2) operands with fp32 scales per 1x128 block
// (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F) or per 128x128 tile
// (BLK128x128_32F), fp32 accumulation, bf16 output (or fp32 accumulated into,
// for wgrad). The operands' layouts are formats/fp8_block.h's GEMM layouts;
// docs/fp8.md ("GEMMs") gives the cuBLASLt mapping: every FP8 GEMM on Hopper is
// TN in column-major terms (both operands K-major), which the row-major
// D = A . B^T below is, with A and B both rows x K.
//
// As models/cuda/gemm.h: the first call of a shape asks cuBLASLt's heuristic
// once and keeps its answer, so a shape always runs one algorithm (same bits).
// Its first answer, except for the accumulating (wgrad) shapes, which skip
// 192x64 tiles (fp8_gemm.cu says why; bench/gpubench_fp8_algos times them all).
// The first call of a bf16-output shape then times that answer's cluster
// shapes and keeps the fastest of those whose output hashes as the
// heuristic's, so the same bits whichever (by default: cluster_choice.h,
// MXDP_GEMM_CLUSTERS).
// M, N and K must be multiples of 16 (a last partial block or tile scales
// the elements present); 2-D tiles on both operands are refused
// (Hopper's cuBLASLt block scaling has 1-D x 1-D, 1-D x 2-D and 2-D x 1-D).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "models/cuda/cluster_choice.h"
#include "models/fp8/fp8_operand.h"

namespace mxdp::cuda {

class Fp8Gemm {
 public:
  // wgrad_split_k false: the accumulating (wgrad) shapes are planned with no
  // workspace, which rules out the algorithms that split K and add the parts
  // in the workspace (gpubench_fp8_linear times both ways).
  explicit Fp8Gemm(cudaStream_t stream, bool wgrad_split_k = true, ClusterChoice clusters = cluster_choice_from_env());
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  // d[M,N] = a[M,K] . b[N,K]^T: bf16 d (overwritten), or fp32 d += (accumulate).
  void nt(const Fp8Operand& a, const Fp8Operand& b, int M, int N, int K, uint16_t* d_bf16);
  void nt_accumulate(const Fp8Operand& a, const Fp8Operand& b, int M, int N, int K, float* d_f32);
  // d = a . b^T + bias[N] (bf16 bias, added in fp32 before the one rounding to
  // bf16) with cuBLASLt's BIAS epilogue. false, and nothing run, when cuBLASLt
  // has no such algorithm for the shape (decided once per shape): the caller
  // then runs nt() and adds the bias itself.
  bool nt_bias(const Fp8Operand& a, const Fp8Operand& b, int M, int N, int K, const uint16_t* bias, uint16_t* d_bf16);

  // The three GEMMs of Y = X W^T, W {N, K} (models/fp8/fp8_gemm_emulated.h has the same on the CPU):
  //   fprop: y[M,N]   = x[M,K] (1x128) . w[N,K]^T (tiles)
  //   dgrad: dx[M,K]  = dy[M,N] (1x128) . wt[K,N]^T (tiles of W^T)
  //   wgrad: dw[N,K] += dyt[N,M] (1x128 of dY^T) . xt[K,M]^T (1x128 of X^T), fp32
  void fprop(const Fp8Operand& x, const Fp8Operand& w, int M, int N, int K, uint16_t* y) { nt(x, w, M, N, K, y); }
  void dgrad(const Fp8Operand& dy, const Fp8Operand& wt, int M, int N, int K, uint16_t* dx) {
    nt(dy, wt, M, K, N, dx);
  }
  void wgrad(const Fp8Operand& dyt, const Fp8Operand& xt, int M, int N, int K, float* dw) {
    nt_accumulate(dyt, xt, N, K, M, dw);
  }

  size_t cached_shapes() const;
  // The cluster shape (cublasLtClusterShape_t) each planned shape runs, in the plans' order.
  std::vector<uint16_t> plan_clusters() const;
  // Number of cluster shapes refused for giving other bits than the heuristic's (cublaslt_plans.h's choose_cluster).
  size_t clusters_refused() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mxdp::cuda
