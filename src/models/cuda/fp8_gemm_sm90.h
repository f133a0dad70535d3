// mxdp's own block-scaled FP8 GEMM for Hopper (sm_90a: TMA loads, wgmma,
// fp32 promotion every 128 of K), the first step of docs/fp8.md's "an FP8 GEMM
// of our own whose epilogue quantizes its output". It computes what
// Fp8Gemm::nt (models/cuda/fp8_gemm.h, cuBLASLt) computes for fprop and dgrad:
//   d[M,N] (bf16) = a[M,K] (E4M3, 1x128 scales) . b[N,K]^T (E4M3, 128x128 tiles)
// in the operand layouts of formats/fp8_block.h, so the two can be compared
// on the same operands (gputest_fp8_gemm, gpubench_fp8_linear); on an H100 it
// gives cuBLASLt's bits at every shape tested, at 0.84-0.98x its speed at the
// 1558M linears (docs/fp8.md, "Our own FP8 GEMM"). The model calls it only
// with MXDP_FP8_GEMM=own (Fp8Linear): its use is the epilogue of its own, which
// cuBLASLt's block-scaled kernels cannot take.
//
// The kernel: a CTA computes 128x128 tiles of d with three warpgroups, one
// loading 128x128 tiles of a and b into a ring of shared-memory stages by TMA
// (128-byte swizzle), two each multiplying 64 rows by wgmma (m64n128k32, fp32
// accumulators), with two 128-deep k-blocks in flight (setmaxnreg gives the
// loader's registers to the multipliers). Every 128 of K the partial product
// is scaled by the row's 1x128 scale times the tile scale and added to the
// running fp32 sum (DeepSeek-V3's "promotion"); the sum is rounded to bf16 once
// at the end, and TMA stores the tile from shared memory while the consumers
// go on to the next. Partial tiles at the edges (M, N, K multiples of 16) are
// zero-filled by TMA on the way in and clipped on the way out.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "models/fp8/fp8_operand.h"

namespace mxdp::cuda {

// True when the device and the build can run fp8_gemm_nt_sm90 (compute
// capability 9.0, the sm_90a kernel compiled in) and M, N, K are multiples of 16.
// For a caller with another route (Fp8Linear: cuBLASLt) to choose by; the entry
// points below check the same again and throw, saying whether the shape or the
// device was refused. Cheap enough to ask twice a GEMM: six integer tests and a
// device query made once a process.
bool fp8_gemm_sm90_supported(int M, int N, int K);

// How many clusters of `cluster` CTAs (1, 2 or 4) fit on the device at once: the
// persistent grid (gpubench_fp8_linear prints it).
int fp8_gemm_sm90_resident_clusters(int cluster);

// d = a . b^T (+ bias[N], bf16, added in fp32 before the rounding to bf16; may
// be null): a {M, K} Rows1x128 E4M3, b {N, K} Tiles128 E4M3 (GEMM scale layout).
// Throws (util/check.h) for other kinds or scalings, or an unsupported shape.
// cluster: 1 (each CTA loads its own tiles), 2 (two CTAs, 256 rows of d,
// share each tile of b through a TMA multicast: the default, the fastest on an
// H100) or 4 (2 x 2 CTAs, 256 x 256 of d, sharing both a's and b's tiles;
// 10-20% slower than 2).
// persistent: a grid of as many clusters as fit on the device at once, each
// taking tile after tile, instead of one a tile. Same bits every way;
// gpubench_fp8_linear times them.
void fp8_gemm_nt_sm90(const Fp8Operand& a, const Fp8Operand& b, int M, int N, int K, const uint16_t* bias,
                      uint16_t* d, cudaStream_t stream, int cluster = 2, bool persistent = true);

// The weight gradient's form: d[M,N] (fp32) += a[M,K] . b[N,K]^T with both
// operands E4M3 with 1x128 scales (Fp8Gemm::nt_accumulate's operands: dY^T and
// X^T, K the tokens); each 128-deep product is scaled by its row's and its
// column's scale. cuBLASLt's bits at the tested shapes, at about 0.5x its
// speed (its kernel spills registers and adds into d with plain loads and
// stores); not called by the model.
void fp8_gemm_nt_accumulate_sm90(const Fp8Operand& a, const Fp8Operand& b, int M, int N, int K, float* d,
                                 cudaStream_t stream, int cluster = 1, bool persistent = true);

// fc's forward with act_quantize's work (models/cuda/fp8_linear.h: bias,
// GELU, both FP8 operands) done in the GEMM's epilogue, on the output tile
// while it is in shared memory, instead of by a pass that reads it back:
//   pre = bf16(a . b^T + bias)              (d, the pre-activation backward reads)
//   g   = bf16(gelu_tanh(pre))              (models/cuda/gelu_fast.cuh)
//   rows: g in 1x128 blocks along N (codes [M, N], scales [ceil(N / 128)][M])
//   cols: g^T in 1x128 blocks along M (codes [N, M], scales [M / 128][N])
// Bit for bit fp8_gemm_nt_sm90 with the bias followed by act_quantize({.x = d,
// .op = Gelu, .rows, .cols}) (gputest_fp8_gemm).
// M must be a multiple of 128, the bias and codes 16-byte aligned. Measured
// slower than those two passes (0.343 against 0.285 ms at 1558M's fc on an
// H100): the consumers do the work while the tensor cores wait (docs/fp8.md,
// "Fusing fc's GELU and quantize into the GEMM").
struct Fp8GeluOut {
  uint16_t* pre = nullptr;
  uint8_t* rows_codes = nullptr;
  float* rows_scales = nullptr;
  uint8_t* cols_codes = nullptr;
  float* cols_scales = nullptr;
};
void fp8_gemm_gelu_quant_sm90(const Fp8Operand& a, const Fp8Operand& b, int M, int N, int K, const uint16_t* bias,
                              const Fp8GeluOut& out, cudaStream_t stream, int cluster = 2, bool persistent = true);

}  // namespace mxdp::cuda
