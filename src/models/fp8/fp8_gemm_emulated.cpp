#include "models/fp8/fp8_gemm_emulated.h"

#include <cstdint>
#include <vector>

#include "formats/codec.h"
#include "formats/fp8_block.h"
#include "models/cpu/matmul.h"
#include "util/check.h"

namespace mxdp {

namespace {

// The rows x K operand, dequantized to fp32.
std::vector<float> dequantize(const Fp8Operand& o, int64_t rows, int64_t K) {
  MXDP_CHECK(o.codes && o.scales, "fp8 GEMM: null operand");
  std::vector<float> y(rows * K);
  if (o.scaling == Fp8Scaling::Rows1x128) {
    fp8_dequantize_1x128(o.codes, o.scales, rows, K, o.kind, y.data());
    return y;
  }
  MXDP_CHECK(o.kind == Fp8Kind::E4M3, "fp8 GEMM: 128x128 tiles are E4M3");
  const int64_t ld = fp8b128_gemm_scale_ld(K);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < K; ++k)
      y[r * K + k] = codec::fp8_block_dequant(o.codes[r * K + k], o.scales[r / kFp8Tile * ld + k / kFp8Tile], o.kind);
  return y;
}

}  // namespace

void fp8_gemm_nt_emulated(const Fp8Operand& a, const Fp8Operand& b, int64_t M, int64_t N, int64_t K, float* d,
                          bool accumulate) {
  MXDP_CHECK(M > 0 && N > 0 && K > 0, "fp8 GEMM: M, N, K must be > 0, got ", M, ", ", N, ", ", K);
  MXDP_CHECK(d, "fp8 GEMM: null output");
  MXDP_CHECK(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX, "fp8 GEMM: M, N, K must fit an int, got ", M, ", ",
             N, ", ", K);
  const std::vector<float> A = dequantize(a, M, K), B = dequantize(b, N, K);
  std::vector<float> bt;
  cpu::gemm_nt(d, A.data(), B.data(), int(M), int(N), int(K), accumulate, bt);
}

void fp8_fprop_emulated(const Fp8Operand& x, const Fp8Operand& w, int64_t M, int64_t N, int64_t K, float* y) {
  fp8_gemm_nt_emulated(x, w, M, N, K, y, false);
}
void fp8_dgrad_emulated(const Fp8Operand& dy, const Fp8Operand& wt, int64_t M, int64_t N, int64_t K, float* dx) {
  fp8_gemm_nt_emulated(dy, wt, M, K, N, dx, false);
}
void fp8_wgrad_emulated(const Fp8Operand& dyt, const Fp8Operand& xt, int64_t M, int64_t N, int64_t K, float* dw) {
  fp8_gemm_nt_emulated(dyt, xt, N, K, M, dw, true);
}

}  // namespace mxdp
