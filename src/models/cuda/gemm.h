// GEMMs of the GPU GPT through cuBLASLt: bf16 operands, fp32 accumulation,
// with the epilogues that fuse (bias, GELU with its pre-activation kept, dGELU).
//
// Everything is in the row-major vocabulary of the model (PyTorch's nn.Linear:
// W is {out, in}); the column-major translation lives in gemm.cu only.
//
// One place chooses the algorithm: the first call of a shape (m, n, k,
// epilogue, types, operand alignments) asks cuBLASLt's heuristic once and keeps
// its first answer, so every later call of that shape runs the same algorithm
// and gives the same bits (cuBLASLt is deterministic for a fixed algorithm on a
// given device). The workspace is fixed (32 MiB), which also fixes the choice.
// The first call of a shape whose GEMM overwrites its output then times that
// answer's cluster shapes and keeps the fastest of those with the heuristic's
// bits, each candidate's output hash checked against the heuristic's (by
// default: cluster_choice.h, MXDP_GEMM_CLUSTERS). The check is what lets the
// bf16 GEMMs time clusters at all: their kernels come from several families,
// and one (the dGELU epilogue's) changes its bits under a 4x1 cluster on an H100.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "models/cuda/cluster_choice.h"

namespace mxdp::cuda {

class Gemm {
 public:
  // wgrad_split_k false: backward_weight's shapes are planned with no
  // workspace, which rules out the algorithms that split K and add the parts
  // in the workspace (gpubench_fp8_linear times both ways).
  explicit Gemm(cudaStream_t stream, bool wgrad_split_k = true, ClusterChoice clusters = cluster_choice_from_env());
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // out[M,N] = inp[M,K] @ W[N,K]^T (+ bias[N]). With gelu_pre (not null):
  // gelu_pre = that pre-activation and out = gelu_tanh(gelu_pre). All bf16.
  void forward(uint16_t* out, const uint16_t* inp, const uint16_t* W, const uint16_t* bias, int M, int N, int K,
               uint16_t* gelu_pre = nullptr);
  // dinp[M,K] = dout[M,N] @ W[N,K] (bf16). With gelu_pre ([M,K], the forward's
  // pre-activation of a GELU whose output was this layer's input): dinp is
  // multiplied by gelu'(gelu_pre), i.e. the gradient flows through the GELU too.
  void backward_data(uint16_t* dinp, const uint16_t* dout, const uint16_t* W, int M, int N, int K,
                     const uint16_t* gelu_pre = nullptr);
  // dW[N,K] += dout[M,N]^T @ inp[M,K]: fp32 accumulation into the fp32 grad.
  void backward_weight(float* dW, const uint16_t* dout, const uint16_t* inp, int M, int N, int K);

  // Number of distinct shapes whose algorithm has been chosen (tests).
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
