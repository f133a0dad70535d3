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
// With mode `all` it then also builds every configuration cuBLASLt accepts
// beyond the heuristic's answers (each algorithm id x tile x stages x cluster
// x CTA swizzle x custom option, for the ids the heuristic answered with, at
// split-K 1 and at each split the answers used), checks it with
// cublasLtMatmulAlgoCheck and times it ("source": "enum"); the bits are
// compared only where it is within 5% of the heuristic's fastest answer (an
// output copy costs more than the GEMM).
//
//   gpubench_fp8_algos [model=gpt2-124m] [tokens=16384] [reps=20] [max_algos=32]
//                      [mode=heuristic|all] [pass=all|fprop|dgrad|wgrad]
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu_timing.h"
#include "models/cuda/cublaslt_plans.h"  // MXDP_CUBLAS_CHECK
#include "models/gpt2/gpt.h"
#include "util/check.h"
#include "util/cuda_check.h"

using namespace mxdp;

namespace {

template <class T>
T* dev_random(size_t n, uint64_t seed) {
  std::vector<T> h(n);
  std::mt19937_64 g(seed);
  for (auto& x : h) {
    if constexpr (sizeof(T) == 4)
      x = T(1.0 + double(g() % 1000) * 1e-5);  // positive scales, fp32 accum seeds
    else
      x = T(g() & 0x77);  // finite E4M3 codes
  }
  T* p = nullptr;
  MXDP_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
  MXDP_CUDA_CHECK(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

// One configuration attribute; cluster and inner shape are 16-bit, the rest 32.
int config(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr) {
  size_t got = 0;
  if (attr == CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID || attr == CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID) {
    uint16_t v = 0;
    return cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof v, &got) == CUBLAS_STATUS_SUCCESS ? int(v) : -1;
  }
  uint32_t v = 0;
  return cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof v, &got) == CUBLAS_STATUS_SUCCESS ? int(v) : -1;
}

struct Gemm {
  const char* layer;
  const char* pass;
  int m, n, k;    // cuBLASLt's (column-major): D{m,n} = A{k,m}^T B{k,n}
  bool a_tiles;   // A's scales 128x128 tiles (the weight), else 1x128
  bool fp32_out;  // wgrad: fp32 D += (beta 1)
};

struct Sweep {
  cublasLtHandle_t lt;
  cudaStream_t s;
  void* ws;
  size_t ws_bytes;
  const uint8_t *ac, *bc;
  float* d;
  int reps;

  cublasLtMatmulDesc_t desc{};
  cublasLtMatrixLayout_t la{}, lb{}, lcd{};
  Gemm g{};
  std::vector<char> first,
      out;  // the heuristic's first answer's output, this one's
  double best_heuristic_ms = 1e30;

  void open(const Gemm& gemm, const float* as, const float* bs) {
    g = gemm;
    MXDP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    MXDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    MXDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    const cublasLtMatmulMatrixScale_t ma =
        g.a_tiles ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    const cublasLtMatmulMatrixScale_t mb = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    MXDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, sizeof ma));
    MXDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, sizeof mb));
    MXDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &as, sizeof as));
    MXDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &bs, sizeof bs));
    MXDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, g.k, g.m, g.k));
    MXDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, g.k, g.n, g.k));
    MXDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lcd, out_type(), g.m, g.n, g.m));
    first.assign(out_bytes(), 0);
    out.assign(out_bytes(), 0);
    best_heuristic_ms = 1e30;
  }
  void close() {
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lcd);
    cublasLtMatmulDescDestroy(desc);
  }
  cudaDataType_t out_type() const { return g.fp32_out ? CUDA_R_32F : CUDA_R_16BF; }
  size_t out_bytes() const { return size_t(g.m) * g.n * (g.fp32_out ? 4 : 2); }

  // Times one algorithm and prints its line; `rank` is its place among the
  // heuristic's answers (-1: enumerated). Returns its ms.
  double time(const cublasLtMatmulAlgo_t& algo, size_t ws_need, float waves, int rank) {
    const float alpha = 1.0f, beta = g.fp32_out ? 1.0f : 0.0f;
    auto run = [&] {
      MXDP_CUBLAS_CHECK(cublasLtMatmul(lt, desc, &alpha, ac, la, bc, lb, &beta, d, lcd, d, lcd, &algo, ws, ws_bytes, s));
    };
    auto output = [&](std::vector<char>& to) {  // the same seed output, one call
      MXDP_CUDA_CHECK(cudaMemset(d, 0, out_bytes()));
      run();
      MXDP_CUDA_CHECK(cudaStreamSynchronize(s));
      MXDP_CUDA_CHECK(cudaMemcpy(to.data(), d, out_bytes(), cudaMemcpyDeviceToHost));
    };
    if (rank == 0) output(first);
    const double ms = bench::best_window_ms(s, reps, run);
    const char* same = "null";  // not compared
    if (rank == 0) {
      same = "true";
    } else if (rank > 0 || ms < 1.05 * best_heuristic_ms) {
      output(out);
      same = std::memcmp(first.data(), out.data(), out_bytes()) == 0 ? "true" : "false";
    }
    if (rank >= 0) best_heuristic_ms = std::min(best_heuristic_ms, ms);
    const double flops = 2.0 * g.m * g.n * g.k;
    std::printf(
        "{\"layer\": \"%s\", \"pass\": \"%s\", \"m\": %d, \"n\": %d, \"k\": "
        "%d, \"source\": \"%s\", \"rank\": %d, "
        "\"ms\": %.4f, \"tflops\": %.0f, \"algo_id\": %d, \"tile\": %d, "
        "\"stages\": %d, \"split_k\": %d, "
        "\"reduction\": %d, \"swizzle\": %d, \"custom\": %d, \"cluster\": %d, "
        "\"inner\": %d, \"workspace\": %zu, "
        "\"waves\": %.2f, \"bits_as_first\": %s}\n",
        g.layer, g.pass, g.m, g.n, g.k, rank >= 0 ? "heuristic" : "enum", rank, ms, flops / (ms * 1e-3) / 1e12,
        config(algo, CUBLASLT_ALGO_CONFIG_ID), config(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
        config(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID), config(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
        config(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME), config(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
        config(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION), config(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
        config(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID), ws_need, double(waves), same);
    std::fflush(stdout);
    return ms;
  }

  // The heuristic's answers, each timed; returns them.
  std::vector<cublasLtMatmulHeuristicResult_t> heuristic(int max_algos) {
    cublasLtMatmulPreference_t pref;
    MXDP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    MXDP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                  sizeof ws_bytes));
    std::vector<cublasLtMatmulHeuristicResult_t> res(max_algos);
    int found = 0;
    MXDP_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lcd, lcd, pref, max_algos, res.data(), &found));
    cublasLtMatmulPreferenceDestroy(pref);
    res.resize(found);
    for (int i = 0; i < found; ++i) time(res[i].algo, res[i].workspaceSize, res[i].wavesCount, i);
    return res;
  }

  // Every configuration cuBLASLt accepts (cublasLtMatmulAlgoCheck) beyond the
  // heuristic's answers, each timed once it is new.
  void enumerate(const std::vector<cublasLtMatmulHeuristicResult_t>& answers) {
    std::vector<std::pair<int, int>> splits{{1, CUBLASLT_REDUCTION_SCHEME_NONE}};  // (split-K, reduction)
    for (const auto& r : answers) {
      const std::pair<int, int> sr{config(r.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                                   config(r.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME)};
      if (sr.first > 1 && std::find(splits.begin(), splits.end(), sr) == splits.end()) splits.push_back(sr);
    }
    long tried = 0, timed = 0;
    std::vector<std::vector<char>> seen;  // configurations already timed, as bytes
    for (const auto& r : answers) seen.emplace_back((const char*)&r.algo, (const char*)&r.algo + sizeof r.algo);
    // The algorithm ids the heuristic answered with: a sweep of all 12 FP8 ids
    // (cublasLtMatmulAlgoGetIds) on an H100 found configurations only in those.
    std::vector<int> ids;
    for (const auto& r : answers) {
      const int id = config(r.algo, CUBLASLT_ALGO_CONFIG_ID);
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
    const cudaDataType_t t8 = CUDA_R_8F_E4M3;
    const uint16_t clusters[] = {CUBLASLT_CLUSTER_SHAPE_AUTO,  CUBLASLT_CLUSTER_SHAPE_1x1x1,
                                 CUBLASLT_CLUSTER_SHAPE_2x1x1, CUBLASLT_CLUSTER_SHAPE_1x2x1,
                                 CUBLASLT_CLUSTER_SHAPE_2x2x1, CUBLASLT_CLUSTER_SHAPE_4x1x1,
                                 CUBLASLT_CLUSTER_SHAPE_1x4x1};
    for (const int id : ids) {
      cublasLtMatmulAlgo_t base;
      if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, t8, t8, out_type(), out_type(), id, &base) !=
          CUBLAS_STATUS_SUCCESS)
        continue;
      const std::vector<uint32_t> tiles = cap_list(base, CUBLASLT_ALGO_CAP_TILE_IDS);
      const std::vector<uint32_t> stages = cap_list(base, CUBLASLT_ALGO_CAP_STAGES_IDS);
      int32_t split_ok = 0, custom_max = 0;
      uint32_t swz_ok = 0;
      size_t got = 0;
      cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &split_ok, sizeof split_ok, &got);
      cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swz_ok, sizeof swz_ok, &got);
      cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, &custom_max, sizeof custom_max,
                                        &got);
      for (uint32_t tile : tiles)
        for (uint32_t st : stages)
          for (uint16_t cl : clusters)
            for (uint32_t swz = 0; swz <= swz_ok; ++swz)
              for (uint32_t custom = 0; custom <= uint32_t(custom_max); ++custom)
                for (const auto& [sk, red] : splits) {
                  if (sk > 1 && !split_ok) continue;
                  cublasLtMatmulAlgo_t a = base;
                  const int32_t sk32 = sk;
                  const uint32_t red32 = red;
                  if (!set(a, CUBLASLT_ALGO_CONFIG_TILE_ID, tile) || !set(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, st) ||
                      !set(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, cl) ||
                      !set(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, swz) ||
                      !set(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, custom) ||
                      !set(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, sk32) ||
                      !set(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, red32))
                    continue;
                  ++tried;
                  cublasLtMatmulHeuristicResult_t chk{};
                  if (cublasLtMatmulAlgoCheck(lt, desc, la, lb, lcd, lcd, &a, &chk) != CUBLAS_STATUS_SUCCESS ||
                      chk.workspaceSize > ws_bytes)
                    continue;
                  std::vector<char> bytes((const char*)&a, (const char*)&a + sizeof a);
                  if (std::find(seen.begin(), seen.end(), bytes) != seen.end()) continue;
                  seen.push_back(std::move(bytes));
                  time(a, chk.workspaceSize, chk.wavesCount, -1);
                  ++timed;
                }
    }
    std::fprintf(stderr, "%s %s: %zu algorithm ids, %ld configurations tried, %ld new ones timed\n", g.layer, g.pass,
                 ids.size(), tried, timed);
  }

  static std::vector<uint32_t> cap_list(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoCapAttributes_t cap) {
    size_t bytes = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&a, cap, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS || bytes == 0)
      return {0};  // undefined: the kernel's own
    std::vector<uint32_t> v(bytes / sizeof(uint32_t));
    if (cublasLtMatmulAlgoCapGetAttribute(&a, cap, v.data(), bytes, &bytes) != CUBLAS_STATUS_SUCCESS) return {0};
    return v;
  }
  template <class T>
  static bool set(cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr, const T& v) {
    return cublasLtMatmulAlgoConfigSetAttribute(&a, attr, &v, sizeof v) == CUBLAS_STATUS_SUCCESS;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const std::string model = argc > 1 ? argv[1] : "gpt2-124m";
  const int M = argc > 2 ? std::atoi(argv[2]) : 16384;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 20;
  const int max_algos = argc > 4 ? std::atoi(argv[4]) : 32;
  const std::string mode = argc > 5 ? argv[5] : "heuristic";
  const std::string passes = argc > 6 ? argv[6] : "all";
  try {
    MXDP_CHECK(M > 0 && M % 128 == 0 && reps > 0 && max_algos > 0,
               "tokens must be a positive multiple of 128, "
               "reps and max_algos positive");
    MXDP_CHECK(mode == "heuristic" || mode == "all", "mode must be heuristic or all, got ", mode);
    MXDP_CHECK(passes == "all" || passes == "fprop" || passes == "dgrad" || passes == "wgrad",
               "pass must be all, fprop, dgrad or wgrad, got ", passes);
    const GptConfig cfg = gpt_config(model);
    const int C = cfg.d_model;
    Sweep sw{};
    sw.reps = reps;
    MXDP_CUDA_CHECK(cudaStreamCreate(&sw.s));
    MXDP_CUBLAS_CHECK(cublasLtCreate(&sw.lt));
    sw.ws_bytes = size_t(32) << 20;  // Fp8Gemm's workspace
    MXDP_CUDA_CHECK(cudaMalloc(&sw.ws, sw.ws_bytes));
    const size_t big = size_t(M) * 4 * C;
    sw.ac = dev_random<uint8_t>(big, 1);
    sw.bc = dev_random<uint8_t>(big, 2);
    float *as = dev_random<float>(big / 128, 3), *bs = dev_random<float>(big / 128, 4);
    sw.d = dev_random<float>(std::max(size_t(16) * C * C, big),
                             5);  // the largest output: a wgrad's 16 C^2
    std::vector<Gemm> gemms;
    struct Layer {
      const char* name;
      int N, K;
    };
    for (const Layer& L :
         {Layer{"qkv", 3 * C, C}, Layer{"attn.proj", C, C}, Layer{"fc", 4 * C, C}, Layer{"mlp.proj", C, 4 * C}}) {
      gemms.push_back({L.name, "fprop", L.N, M, L.K, true, false});
      gemms.push_back({L.name, "dgrad", L.K, M, L.N, true, false});
      gemms.push_back({L.name, "wgrad", L.K, L.N, M, false, true});
    }
    for (const Gemm& g : gemms) {
      if (passes != "all" && passes != g.pass) continue;
      sw.open(g, as, bs);
      const auto answers = sw.heuristic(max_algos);
      if (mode == "all") sw.enumerate(answers);
      sw.close();
    }
    cublasLtDestroy(sw.lt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpubench_fp8_algos: %s\n", e.what());
    return 1;
  }
  return 0;
}
