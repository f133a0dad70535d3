// Every algorithm cuBLASLt's heuristic offers for the block-scaled FP8 GEMMs
// of one GPT-2 size, timed on one GPU in one run (docs/fp8.md, "GEMMs"; the
// tables: docs/fp8_history.md, "Every algorithm, timed"): how Fp8Gemm's fixed
// choice per shape was made. For each GEMM
// (fprop, dgrad, wgrad of the four block linears) it asks for up to 32
// answers with the workspace Fp8Gemm gives, times each and prints one JSON
// line per algorithm with its configuration (tile, stages, split-K, swizzle,
// cluster) and, for the wgrad's fp32 accumulation, whether its bits equal the
// heuristic's first answer's.
//
//   gpubench_fp8_algos [model=gpt2-124m] [tokens=16384] [reps=20] [max_algos=32]
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "models/gpt2/gpt.h"
#include "util/check.h"
#include "util/cuda_check.h"
#include "gpu_timing.h"

using namespace mxdp;

namespace {

#define LT_CHECK(call)                                                                                 \
  do {                                                                                                 \
    cublasStatus_t st_ = (call);                                                                       \
    if (st_ != CUBLAS_STATUS_SUCCESS) MXDP_FAIL("cuBLASLt: " #call " failed: cublasStatus_t ", int(st_)); \
  } while (0)

template <class T>
T* dev_random(size_t n, uint64_t seed) {
  std::vector<T> h(n);
  std::mt19937_64 g(seed);
  for (auto& x : h) {
    if constexpr (sizeof(T) == 4) x = T(1.0 + double(g() % 1000) * 1e-5);  // positive scales, fp32 accum seeds
    else x = T(g() & 0x77);                                                 // finite E4M3 codes
  }
  T* p = nullptr;
  MXDP_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
  MXDP_CUDA_CHECK(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

int config(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr) {
  uint32_t v = 0;  // every attribute printed here is a 32-bit (or narrower) integer
  size_t got = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof v, &got) != CUBLAS_STATUS_SUCCESS) return -1;
  return int(v);
}

struct Gemm {
  const char* layer;
  const char* pass;
  int m, n, k;        // cuBLASLt's (column-major): D{m,n} = A{k,m}^T B{k,n}
  bool a_tiles;       // A's scales 128x128 tiles (the weight), else 1x128
  bool fp32_out;      // wgrad: fp32 D += (beta 1)
};

}  // namespace

int main(int argc, char** argv) {
  const std::string model = argc > 1 ? argv[1] : "gpt2-124m";
  const int M = argc > 2 ? std::atoi(argv[2]) : 16384;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 20;
  const int max_algos = argc > 4 ? std::atoi(argv[4]) : 32;
  try {
    const GptConfig cfg = gpt_config(model);
    const int C = cfg.d_model;
    cudaStream_t s;
    MXDP_CUDA_CHECK(cudaStreamCreate(&s));
    cublasLtHandle_t lt;
    LT_CHECK(cublasLtCreate(&lt));
    const size_t ws_bytes = size_t(32) << 20;  // Fp8Gemm's workspace
    void* ws = nullptr;
    MXDP_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
    const size_t big = size_t(M) * 4 * C;
    uint8_t *ac = dev_random<uint8_t>(big, 1), *bc = dev_random<uint8_t>(big, 2);
    float *as = dev_random<float>(big / 128, 3), *bs = dev_random<float>(big / 128, 4);
    float* d = dev_random<float>(std::max(size_t(16) * C * C, big), 5);  // the largest output: a wgrad's 16 C^2
    std::vector<Gemm> gemms;
    struct Layer {
      const char* name;
      int N, K;
    };
    for (const Layer& L : {Layer{"qkv", 3 * C, C}, Layer{"attn.proj", C, C}, Layer{"fc", 4 * C, C},
                           Layer{"mlp.proj", C, 4 * C}}) {
      gemms.push_back({L.name, "fprop", L.N, M, L.K, true, false});
      gemms.push_back({L.name, "dgrad", L.K, M, L.N, true, false});
      gemms.push_back({L.name, "wgrad", L.K, L.N, M, false, true});
    }
    for (const Gemm& g : gemms) {
      cublasLtMatmulDesc_t desc;
      LT_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
      LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
      LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
      const cublasLtMatmulMatrixScale_t ma =
          g.a_tiles ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
      const cublasLtMatmulMatrixScale_t mb = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
      LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, sizeof ma));
      LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, sizeof mb));
      LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &as, sizeof as));
      LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &bs, sizeof bs));
      cublasLtMatrixLayout_t la, lb, lcd;
      LT_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, g.k, g.m, g.k));
      LT_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, g.k, g.n, g.k));
      LT_CHECK(cublasLtMatrixLayoutCreate(&lcd, g.fp32_out ? CUDA_R_32F : CUDA_R_16BF, g.m, g.n, g.m));
      cublasLtMatmulPreference_t pref;
      LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
      LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                    sizeof ws_bytes));
      std::vector<cublasLtMatmulHeuristicResult_t> res(max_algos);
      int found = 0;
      LT_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lcd, lcd, pref, max_algos, res.data(), &found));
      const double flops = 2.0 * g.m * g.n * g.k;
      const size_t out_bytes = size_t(g.m) * g.n * (g.fp32_out ? 4 : 2);
      const float alpha = 1.0f, beta = g.fp32_out ? 1.0f : 0.0f;
      std::vector<char> first(out_bytes), out(out_bytes);  // the first answer's output, this answer's
      for (int i = 0; i < found; ++i) {
        const cublasLtMatmulAlgo_t& algo = res[i].algo;
        auto run = [&] {
          LT_CHECK(cublasLtMatmul(lt, desc, &alpha, ac, la, bc, lb, &beta, d, lcd, d, lcd, &algo, ws, ws_bytes, s));
        };
        // Bits: the same seed output, one call, against the first answer's.
        MXDP_CUDA_CHECK(cudaMemset(d, 0, out_bytes));
        run();
        MXDP_CUDA_CHECK(cudaStreamSynchronize(s));
        MXDP_CUDA_CHECK(cudaMemcpy(i == 0 ? first.data() : out.data(), d, out_bytes, cudaMemcpyDeviceToHost));
        const bool same = i == 0 || std::memcmp(first.data(), out.data(), out_bytes) == 0;
        const double ms = bench::best_window_ms(s, reps, run);
        std::printf(
            "{\"layer\": \"%s\", \"pass\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"rank\": %d, \"ms\": %.4f, "
            "\"tflops\": %.0f, \"algo_id\": %d, \"tile\": %d, \"stages\": %d, \"split_k\": %d, \"reduction\": %d, "
            "\"swizzle\": %d, \"custom\": %d, \"cluster\": %d, \"inner\": %d, \"workspace\": %zu, "
            "\"waves\": %.2f, \"bits_as_first\": %s}\n",
            g.layer, g.pass, g.m, g.n, g.k, i, ms, flops / (ms * 1e-3) / 1e12, config(algo, CUBLASLT_ALGO_CONFIG_ID),
            config(algo, CUBLASLT_ALGO_CONFIG_TILE_ID), config(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
            config(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), config(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
            config(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING), config(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
            config(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID), config(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID),
            res[i].workspaceSize, double(res[i].wavesCount), same ? "true" : "false");
        std::fflush(stdout);
      }
      cublasLtMatmulPreferenceDestroy(pref);
      cublasLtMatrixLayoutDestroy(la);
      cublasLtMatrixLayoutDestroy(lb);
      cublasLtMatrixLayoutDestroy(lcd);
      cublasLtMatmulDescDestroy(desc);
    }
    cublasLtDestroy(lt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpubench_fp8_algos: %s\n", e.what());
    return 1;
  }
  return 0;
}
