// The linear layers of every CPU model: out = inp @ W^T + bias and its
// backward, fp32, row-major, W stored {N, K} (PyTorch's nn.Linear layout).
// Each output element is one sum over k in order (parallel.h's contract).
#pragma once

#include <cstdint>
#include <vector>

namespace mxdp::cpu {

// out[M,N] = inp[M,K] @ W^T + bias (bias may be null); wt: scratch for W^T.
void matmul_forward(float* out, const float* inp, const float* W, const float* bias, int M, int N, int K,
                    std::vector<float>& wt);
// dinp = dout @ W (overwritten, if non-null); dW and dbias (if non-null) accumulate.
void matmul_backward(float* dinp, float* dW, float* dbias, const float* dout, const float* inp, const float* W, int M,
                     int N, int K);
// dst[n] += sum over m of src[m*N + n], the sum over m in order, then added.
void colsum_accumulate(float* dst, const float* src, int M, int N);
// d[M,N] = A[M,K] @ B[N,K]^T, or d += it when accumulate: each element one sum
// over k in order from 0, then added to d (a plain triple loop's bits, at the
// speed of matmul_forward's tiles). bt: scratch for B^T.
void gemm_nt(float* d, const float* A, const float* B, int M, int N, int K, bool accumulate, std::vector<float>& bt);

}  // namespace mxdp::cpu
