// cuBLASLt behind Gemm (gemm.h). cuBLASLt is column-major; a row-major {R, C}
// matrix is a column-major {C, R} one, so out[M,N] = inp[M,K] @ W[N,K]^T is
// the column-major D{N,M} = op(W){N,K} * inp{K,M} with W transposed, and so on.
#include "models/cuda/gemm.h"

#include <cublasLt.h>

#include <span>
#include <tuple>

#include "models/cuda/cublaslt_plans.h"
#include "util/check.h"

namespace mxdp::cuda {

namespace {

// Largest power of two (<= 256) that divides the address: algorithms are
// chosen for the alignment they will see.
uint32_t alignment_of(const void* p) {
  uint32_t a = 256;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % a) a /= 2;
  return a;
}

struct Shape {
  int m, n, k;
  bool ta, tb;
  cublasLtEpilogue_t epi;
  bool fp32_out;  // D (and C) fp32, accumulated (beta = 1)
  uint32_t align_a, align_b, align_cd;
  auto key() const { return std::tuple(m, n, k, ta, tb, int(epi), fp32_out, align_a, align_b, align_cd); }
  bool operator<(const Shape& o) const { return key() < o.key(); }
};

}  // namespace

struct Gemm::Impl {
  CublasLtPlans<Shape> lt;

  Impl(cudaStream_t stream, bool wgrad_split_k, ClusterChoice clusters) : lt(stream, wgrad_split_k, clusters) {}

  CublasLtPlan& plan(const Shape& s) {
    return lt.get(s, [&](CublasLtPlan& p) {
      MXDP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      const cublasOperation_t ta = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
      MXDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
      MXDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
      MXDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &s.epi, sizeof s.epi));
      if (s.epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || s.epi == CUBLASLT_EPILOGUE_GELU_AUX ||
          s.epi == CUBLASLT_EPILOGUE_DGELU) {
        const int64_t ld = s.m;
        MXDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
      }
      // Column-major operand shapes: op(A) is {m, k}, op(B) is {k, n}, D is {m, n}.
      MXDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, s.ta ? s.k : s.m, s.ta ? s.m : s.k, s.ta ? s.k : s.m));
      MXDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, s.tb ? s.n : s.k, s.tb ? s.k : s.n, s.tb ? s.n : s.k));
      MXDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.cd, s.fp32_out ? CUDA_R_32F : CUDA_R_16BF, s.m, s.n, s.m));

      // The heuristic chooses for the operands' alignments (C and D are one buffer).
      cublasLtMatmulHeuristicResult_t res{};
      int found = 0;
      const cublasStatus_t st = lt.heuristic(p, s.fp32_out, 1, &res, &found, [&](cublasLtMatmulPreference_t pref) {
        MXDP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                               &s.align_a, sizeof s.align_a));
        MXDP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                               &s.align_b, sizeof s.align_b));
        MXDP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                               &s.align_cd, sizeof s.align_cd));
        MXDP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                               &s.align_cd, sizeof s.align_cd));
      });
      MXDP_CHECK(st == CUBLAS_STATUS_SUCCESS && found > 0, "cuBLASLt has no algorithm for m=", s.m, " n=", s.n,
                 " k=", s.k, " transa=", s.ta, " transb=", s.tb, " epilogue=", int(s.epi), " fp32 out=", s.fp32_out,
                 " (alignments ", s.align_a, "/", s.align_b, "/", s.align_cd, " bytes): cublasStatus_t ", int(st));
      p.algo = res.algo;
    });
  }

  void run(const Shape& s, const void* A, const void* B, void* D, const void* bias, void* aux) {
    MXDP_CHECK(s.m > 0 && s.n > 0 && s.k > 0, "GEMM with an empty dimension: m=", s.m, " n=", s.n, " k=", s.k);
    CublasLtPlan& p = plan(s);
    if (bias)
      MXDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (aux)
      MXDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    const float alpha = 1.0f, beta = s.fp32_out ? 1.0f : 0.0f;
    auto matmul = [&](const cublasLtMatmulAlgo_t& algo) {
      return cublasLtMatmul(lt.handle(), p.desc, &alpha, A, p.a, B, p.b, &beta, D, p.cd, D, p.cd, &algo,
                            lt.workspace(), lt.kWorkspace, lt.stream());
    };
    // A non-accumulating call's D (and a GELU forward's aux) is output only: no caller passes an input as either,
    // so choose_cluster may run the GEMM again and again before the call below writes them for good.
    const bool aux_out = s.epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || s.epi == CUBLASLT_EPILOGUE_GELU_AUX;
    MXDP_CHECK(s.fp32_out || (D != A && D != B && D != aux), "GEMM: the output is one of its inputs");
    MXDP_CHECK(!aux_out || (aux != A && aux != B), "GEMM: the GELU pre-activation out is one of its inputs");
    const size_t d_bytes = size_t(s.m) * size_t(s.n) * (s.fp32_out ? 4 : 2);
    const GemmOutput outputs[] = {{D, d_bytes}, {aux, size_t(s.m) * size_t(s.n) * 2}};  // aux: bf16, ld m
    lt.choose_cluster(p, !s.fp32_out, std::span(outputs, aux_out ? 2 : 1), matmul);
    MXDP_CUBLAS_CHECK(matmul(p.algo));
  }
};

Gemm::Gemm(cudaStream_t stream, bool wgrad_split_k, ClusterChoice clusters)
    : impl_(std::make_unique<Impl>(stream, wgrad_split_k, clusters)) {}

// The plans' descriptors, the stream's wait, the workspace and the handle go with impl_ (cublaslt_plans.h).
Gemm::~Gemm() = default;

size_t Gemm::cached_shapes() const { return impl_->lt.size(); }
std::vector<uint16_t> Gemm::plan_clusters() const { return impl_->lt.clusters(); }
size_t Gemm::clusters_refused() const { return impl_->lt.refused(); }

void Gemm::forward(uint16_t* out, const uint16_t* inp, const uint16_t* W, const uint16_t* bias, int M, int N, int K,
                   uint16_t* gelu_pre) {
  // D{N,M} = W^T... in column-major: A = W ({K,N} col-major, transposed), B = inp ({K,M}).
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (gelu_pre) epi = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  else if (bias) epi = CUBLASLT_EPILOGUE_BIAS;
  const Shape s{N, M, K, true, false, epi, false, alignment_of(W), alignment_of(inp), alignment_of(out)};
  impl_->run(s, W, inp, out, bias, gelu_pre);
}

void Gemm::backward_data(uint16_t* dinp, const uint16_t* dout, const uint16_t* W, int M, int N, int K,
                         const uint16_t* gelu_pre) {
  // dinp{K,M} = W{K,N} * dout{N,M} (column-major, no transposes).
  const cublasLtEpilogue_t epi = gelu_pre ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT;
  const Shape s{K, M, N, false, false, epi, false, alignment_of(W), alignment_of(dout), alignment_of(dinp)};
  impl_->run(s, W, dout, dinp, nullptr, const_cast<uint16_t*>(gelu_pre));
}

void Gemm::backward_weight(float* dW, const uint16_t* dout, const uint16_t* inp, int M, int N, int K) {
  // dW{K,N} += inp{K,M} * dout{N,M}^T (column-major).
  const Shape s{K, N, M, false, true, CUBLASLT_EPILOGUE_DEFAULT, true, alignment_of(inp), alignment_of(dout),
                alignment_of(dW)};
  impl_->run(s, inp, dout, dW, nullptr, nullptr);
}

}  // namespace mxdp::cuda
