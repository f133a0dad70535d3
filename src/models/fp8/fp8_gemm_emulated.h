// The FP8 GEMMs of a linear layer, emulated on the CPU: the operands are the
// same FP8 codes and GEMM-layout scales the cuBLASLt GEMMs read
// (models/cuda/fp8_gemm.h), dequantized with the CPU codec
// (formats/fp8_block.h) and multiplied in fp32, so the CPU model and the CPU
// test suites run the logic of FP8 compute (which operand is quantized how,
// the transposed weight, the transposed activations of wgrad) without a GPU.
// Numerically it is the exact product of the dequantized operands up to fp32
// accumulation (each output one sum over k in order from 0: cpu::gemm_nt), not
// cuBLASLt's bits.
#pragma once

#include <cstdint>

#include "models/fp8/fp8_operand.h"

namespace mxdp {

// d[M,N] = a[M,K] . b[N,K]^T (+ d when accumulate), fp32.
void fp8_gemm_nt_emulated(const Fp8Operand& a, const Fp8Operand& b, int64_t M, int64_t N, int64_t K, float* d,
                          bool accumulate);

// The three GEMMs of Y = X W^T with W {N, K} (nn.Linear's {out, in}):
//   fprop: y[M,N]  = x[M,K] (1x128) . w[N,K]^T (tiles)
//   dgrad: dx[M,K] = dy[M,N] (1x128) . wt[K,N]^T (tiles of W^T: fp8b128_transpose)
//   wgrad: dw[N,K] += dyt[N,M] (1x128 of dY^T) . xt[K,M]^T (1x128 of X^T)
void fp8_fprop_emulated(const Fp8Operand& x, const Fp8Operand& w, int64_t M, int64_t N, int64_t K, float* y);
void fp8_dgrad_emulated(const Fp8Operand& dy, const Fp8Operand& wt, int64_t M, int64_t N, int64_t K, float* dx);
void fp8_wgrad_emulated(const Fp8Operand& dyt, const Fp8Operand& xt, int64_t M, int64_t N, int64_t K, float* dw);

}  // namespace mxdp
