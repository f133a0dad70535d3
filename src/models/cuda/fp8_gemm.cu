// cuBLASLt behind Fp8Gemm (fp8_gemm.h). Row-major d[M,N] = a[M,K] . b[N,K]^T
// is column-major D{N,M} = op(B_cm) * A_cm with B_cm = b as {K,N} (transposed:
// TRANSA = T) and A_cm = a as {K,M} (TRANSB = N): cuBLASLt's "A" is our b and
// its "B" our a, both K-major, which FP8 on Hopper requires.
#include "models/cuda/fp8_gemm.h"

#include <cublasLt.h>

#include <tuple>

#include "models/cuda/cublaslt_plans.h"
#include "util/check.h"

namespace mxdp::cuda {

namespace {

struct Key {
  int m, n, k;  // cuBLASLt's: m = N, n = M
  Fp8Kind ka, kb;
  Fp8Scaling sa, sb;
  bool fp32_out;
  bool bias;  // bf16 bias epilogue (BIAS: d += bias[N] broadcast over rows, before the bf16 rounding)
  auto tie() const { return std::tuple(m, n, k, int(ka), int(kb), int(sa), int(sb), fp32_out, bias); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Plan : CublasLtPlan {
  bool ok = true;     // false: cuBLASLt has no algorithm for it (a bias plan then falls back)
  bool ran = false;   // it has run once
};

cudaDataType_t fp8_type(Fp8Kind k) { return k == Fp8Kind::E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }
cublasLtMatmulMatrixScale_t scale_mode(Fp8Scaling s) {
  return s == Fp8Scaling::Rows1x128 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                    : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
}

constexpr int kAnswers = 8;  // heuristic answers asked for

int tile_of(const cublasLtMatmulAlgo_t& a) {
  uint32_t tile = 0;
  size_t got = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &got) !=
      CUBLAS_STATUS_SUCCESS)
    return -1;
  return int(tile);
}

// The accumulating (wgrad) GEMMs: the heuristic's first answer that is not a
// 192x64 tile. For every wgrad shape of GPT-2 124M and 774M that
// bench/gpubench_fp8_algos times on an H200, 192x64 is the slowest or next to
// slowest answer (1.35-1.6x the best), and at 124M it is the heuristic's first
// for fc and mlp.proj, where its next answer (64x192, the same split of K) is
// 26% faster (docs/fp8.md, "GEMMs"). A fixed rule, not a timed
// choice, so that a shape runs the same algorithm on every run (same bits).
int pick_wgrad(const cublasLtMatmulHeuristicResult_t* res, int found) {
  for (int i = 0; i < found; ++i)
    if (tile_of(res[i].algo) != CUBLASLT_MATMUL_TILE_192x64) return i;
  return 0;
}

}  // namespace

struct Fp8Gemm::Impl {
  CublasLtPlans<Key, Plan> lt;

  Impl(cudaStream_t stream, bool wgrad_split_k, ClusterChoice clusters) : lt(stream, wgrad_split_k, clusters) {}

  // The scale pointers are set before the heuristic too (as every later call sets them).
  Plan& plan(const Key& s, const float* a_scales, const float* b_scales, const void* bias) {
    return lt.get(s, [&](Plan& p) {
      MXDP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
      MXDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
      MXDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
      const cublasLtMatmulMatrixScale_t ma = scale_mode(s.sa), mb = scale_mode(s.sb);
      MXDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, sizeof ma));
      MXDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, sizeof mb));
      MXDP_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scales, sizeof a_scales));
      MXDP_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scales, sizeof b_scales));
      if (s.bias) {
        const cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        const cudaDataType_t bt = CUDA_R_16BF;
        MXDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
        MXDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
        MXDP_CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
      }
      // A {K, m} col-major (op T: m x K), B {K, n} (op N), C = D {m, n}.
      MXDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, fp8_type(s.ka), s.k, s.m, s.k));
      MXDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, fp8_type(s.kb), s.k, s.n, s.k));
      MXDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.cd, s.fp32_out ? CUDA_R_32F : CUDA_R_16BF, s.m, s.n, s.m));
      cublasLtMatmulHeuristicResult_t res[kAnswers]{};
      int found = 0;
      const cublasStatus_t st = lt.heuristic(p, s.fp32_out, kAnswers, res, &found);
      if (s.bias && (st != CUBLAS_STATUS_SUCCESS || found == 0)) {
        p.ok = false;  // no fused bias for this shape: the caller adds it
        return;
      }
      MXDP_CHECK(st == CUBLAS_STATUS_SUCCESS && found > 0,
                 "cuBLASLt has no block-scaled FP8 algorithm for m=", s.m, " n=", s.n, " k=", s.k,
                 " (scales ", s.sa == Fp8Scaling::Rows1x128 ? "1x128" : "128x128", " x ",
                 s.sb == Fp8Scaling::Rows1x128 ? "1x128" : "128x128", ", ", s.fp32_out ? "fp32" : "bf16",
                 " out): it needs an sm_90 GPU and cuBLAS 12.9 or later; cublasStatus_t ", int(st));
      p.algo = res[s.fp32_out ? pick_wgrad(res, found) : 0].algo;
    });
  }

  // false (nothing run) when a bias was asked for and this shape has no fused one.
  bool run(const Fp8Operand& a, const Fp8Operand& b, int M, int N, int K, void* d, bool fp32_out,
           const uint16_t* bias = nullptr) {
    MXDP_CHECK(M > 0 && N > 0 && K > 0 && M % 16 == 0 && N % 16 == 0 && K % 16 == 0,
               "FP8 GEMM: M, N and K must be positive multiples of 16, got ", M, ", ", N, ", ", K);
    MXDP_CHECK(a.codes && a.scales && b.codes && b.scales && d, "FP8 GEMM: null pointer");
    MXDP_CHECK(!(a.scaling == Fp8Scaling::Tiles128 && b.scaling == Fp8Scaling::Tiles128),
               "FP8 GEMM: 128x128 tiles on both operands is not a Hopper cuBLASLt GEMM");
    MXDP_CHECK((a.scaling != Fp8Scaling::Tiles128 || a.kind == Fp8Kind::E4M3) &&
                   (b.scaling != Fp8Scaling::Tiles128 || b.kind == Fp8Kind::E4M3),
               "FP8 GEMM: 128x128 tiles are E4M3");
    // cuBLASLt's A is our b, its B our a.
    const Key s{N, M, K, b.kind, a.kind, b.scaling, a.scaling, fp32_out, bias != nullptr};
    Plan& p = plan(s, b.scales, a.scales, bias);
    if (!p.ok) return false;
    if (bias)
      MXDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    MXDP_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b.scales, sizeof b.scales));
    MXDP_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a.scales, sizeof a.scales));
    const float alpha = 1.0f, beta = fp32_out ? 1.0f : 0.0f;
    auto matmul = [&](const cublasLtMatmulAlgo_t& algo) {
      return cublasLtMatmul(lt.handle(), p.desc, &alpha, b.codes, p.a, a.codes, p.b, &beta, d, p.cd, d, p.cd, &algo,
                            lt.workspace(), lt.kWorkspace, lt.stream());
    };
    // A bf16 d is this call's output only (the codes are other buffers), which the call below writes for good.
    const GemmOutput out[] = {{d, size_t(M) * size_t(N) * (fp32_out ? 4 : 2)}};
    lt.choose_cluster(p, !fp32_out, out, matmul);
    const cublasStatus_t st = matmul(p.algo);
    if (st != CUBLAS_STATUS_SUCCESS && bias && !p.ran) {  // the fused bias is refused at its first run: fall back
      p.ok = false;
      return false;
    }
    MXDP_CUBLAS_CHECK(st);
    p.ran = true;
    return true;
  }
};

Fp8Gemm::Fp8Gemm(cudaStream_t stream, bool wgrad_split_k, ClusterChoice clusters)
    : impl_(std::make_unique<Impl>(stream, wgrad_split_k, clusters)) {}

// The plans' descriptors, the stream's wait, the workspace and the handle go with impl_ (cublaslt_plans.h).
Fp8Gemm::~Fp8Gemm() = default;

size_t Fp8Gemm::cached_shapes() const { return impl_->lt.size(); }
std::vector<uint16_t> Fp8Gemm::plan_clusters() const { return impl_->lt.clusters(); }
size_t Fp8Gemm::clusters_refused() const { return impl_->lt.refused(); }

void Fp8Gemm::nt(const Fp8Operand& a, const Fp8Operand& b, int M, int N, int K, uint16_t* d_bf16) {
  impl_->run(a, b, M, N, K, d_bf16, false);
}
bool Fp8Gemm::nt_bias(const Fp8Operand& a, const Fp8Operand& b, int M, int N, int K, const uint16_t* bias,
                      uint16_t* d_bf16) {
  MXDP_CHECK(bias, "FP8 GEMM: null bias");
  return impl_->run(a, b, M, N, K, d_bf16, false, bias);
}
void Fp8Gemm::nt_accumulate(const Fp8Operand& a, const Fp8Operand& b, int M, int N, int K, float* d_f32) {
  impl_->run(a, b, M, N, K, d_f32, true);
}

}  // namespace mxdp::cuda
