// The parts of an FP8 linear layer against their bf16 counterparts, one GPU,
// same run (docs/fp8.md, "Where the time goes"): for each block linear of a
// GPT-2 size, the three GEMMs (fprop, dgrad, wgrad) through cuda::Gemm (bf16)
// and cuda::Fp8Gemm (block-scaled E4M3), and act_quantize, the pass that makes
// the FP8 operands, with its bytes moved against the device copy bandwidth
// measured here. One JSON line per measurement.
//
//   gpubench_fp8_linear [model=gpt2-774m] [tokens=8192] [reps=20]
#include <cuda_runtime.h>

#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "formats/codec.h"
#include "formats/fp8_block.h"
#include "models/cuda/fp8_gemm.h"
#include "models/cuda/fp8_gemm_sm90.h"
#include "models/cuda/fp8_linear.h"
#include "models/cuda/gemm.h"
#include "models/gpt2/gpt.h"
#include "util/cuda_check.h"
#include "gpu_timing.h"

using namespace mxdp;

namespace {

template <class T>
T* dev(size_t n, uint64_t seed, bool fill) {
  T* p = nullptr;
  MXDP_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
  if (!fill) {
    MXDP_CUDA_CHECK(cudaMemset(p, 0, n * sizeof(T)));
    return p;
  }
  std::vector<T> h(n);
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  for (auto& x : h) {
    if constexpr (sizeof(T) == 2) x = codec::bf16_from_f32(d(g));
    else if constexpr (sizeof(T) == 4) x = T(d(g) * 0.01f + 1.0f);  // positive scales
    else x = T(g() & 0x77);                                        // finite E4M3 codes
  }
  MXDP_CUDA_CHECK(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}


}  // namespace

int main(int argc, char** argv) {
  const std::string model = argc > 1 ? argv[1] : "gpt2-774m";
  const int M = argc > 2 ? std::atoi(argv[2]) : 8192;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 20;
  try {
    const GptConfig cfg = gpt_config(model);
    const int C = cfg.d_model;
    cudaStream_t s;
    MXDP_CUDA_CHECK(cudaStreamCreate(&s));
    const size_t big = size_t(M) * 4 * C;
    uint16_t *x = dev<uint16_t>(big, 1, true), *y = dev<uint16_t>(big, 2, false), *w = dev<uint16_t>(size_t(16) * C * C, 3, true);
    float* dw = dev<float>(size_t(4) * C * C, 4, false);
    uint8_t *xc = dev<uint8_t>(big, 5, true), *wc = dev<uint8_t>(size_t(4) * C * C, 6, true);
    float *xs = dev<float>(big / 128, 7, true), *ws = dev<float>(size_t(4) * C * C / 128, 8, true);
    // Copy bandwidth (read + write bytes / s) over the same buffers.
    const double copy_ms = bench::best_window_ms(s, reps, [&] { cudaMemcpyAsync(y, x, big * 2, cudaMemcpyDeviceToDevice, s); });
    const double copy_gbs = 2.0 * big * 2 / (copy_ms * 1e-3) / 1e9;
    std::printf("{\"what\": \"copy\", \"bytes\": %zu, \"ms\": %.4f, \"gb_s\": %.0f}\n", big * 4, copy_ms, copy_gbs);
    if (cuda::fp8_gemm_sm90_supported(M, C, C))
      std::printf("{\"what\": \"own_sm90_grid\", \"resident_clusters_of_1\": %d, \"of_2\": %d, \"of_4\": %d}\n",
                  cuda::fp8_gemm_sm90_resident_clusters(1), cuda::fp8_gemm_sm90_resident_clusters(2),
                  cuda::fp8_gemm_sm90_resident_clusters(4));
    cuda::Gemm bf(s), bf_nosplit(s, /*wgrad_split_k=*/false);
    cuda::Fp8Gemm f8(s), f8_nosplit(s, /*wgrad_split_k=*/false);
    const Fp8Operand act{xc, xs, Fp8Kind::E4M3, Fp8Scaling::Rows1x128};
    const Fp8Operand wt{wc, ws, Fp8Kind::E4M3, Fp8Scaling::Tiles128};
    struct Layer {
      const char* name;
      int N, K;
    };
    for (const Layer& L : {Layer{"qkv", 3 * C, C}, Layer{"attn.proj", C, C}, Layer{"fc", 4 * C, C},
                           Layer{"mlp.proj", C, 4 * C}}) {
      const double flops = 2.0 * M * L.N * L.K;
      const double t[6] = {
          bench::best_window_ms(s, reps, [&] { bf.forward(y, x, w, nullptr, M, L.N, L.K); }),
          bench::best_window_ms(s, reps, [&] { f8.fprop(act, wt, M, L.N, L.K, y); }),
          bench::best_window_ms(s, reps, [&] { bf.backward_data(y, x, w, M, L.N, L.K); }),
          bench::best_window_ms(s, reps, [&] { f8.dgrad(act, wt, M, L.N, L.K, y); }),
          bench::best_window_ms(s, reps, [&] { bf.backward_weight(dw, x, y, M, L.N, L.K); }),
          bench::best_window_ms(s, reps, [&] { f8.wgrad(act, act, M, L.N, L.K, dw); }),
      };
      // The weight gradients again, planned without workspace (no split-K).
      const double ns[2] = {
          bench::best_window_ms(s, reps, [&] { bf_nosplit.backward_weight(dw, x, y, M, L.N, L.K); }),
          bench::best_window_ms(s, reps, [&] { f8_nosplit.wgrad(act, act, M, L.N, L.K, dw); }),
      };
      std::printf("{\"what\": \"wgrad_no_split_k\", \"layer\": \"%s\", \"bf16_ms\": %.4f, \"bf16_no_split_ms\": %.4f, "
                  "\"fp8_ms\": %.4f, \"fp8_no_split_ms\": %.4f}\n",
                  L.name, t[4], ns[0], t[5], ns[1]);
      const char* gemm[3] = {"fprop", "dgrad", "wgrad"};
      for (int g = 0; g < 3; ++g)
        std::printf("{\"what\": \"gemm\", \"layer\": \"%s\", \"gemm\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, "
                    "\"bf16_ms\": %.4f, \"fp8_ms\": %.4f, \"bf16_tflops\": %.0f, \"fp8_tflops\": %.0f, "
                    "\"fp8_speedup\": %.3f}\n",
                    L.name, gemm[g], M, L.N, L.K, t[2 * g], t[2 * g + 1], flops / (t[2 * g] * 1e-3) / 1e12,
                    flops / (t[2 * g + 1] * 1e-3) / 1e12, t[2 * g] / t[2 * g + 1]);
      // mxdp's own sm_90a GEMM on the same operands: fprop and dgrad against cuBLASLt's.
      if (cuda::fp8_gemm_sm90_supported(M, L.N, L.K)) {
        for (const int variant : {1, 2, 4, -1, -2, -4}) {  // cluster size, negative: a cluster a tile group
          const int cluster = variant < 0 ? -variant : variant;
          const bool persistent = variant > 0;
          try {
            const double own[2] = {
                bench::best_window_ms(
                    s, reps, [&] { cuda::fp8_gemm_nt_sm90(act, wt, M, L.N, L.K, nullptr, y, s, cluster, persistent); }),
                bench::best_window_ms(
                    s, reps, [&] { cuda::fp8_gemm_nt_sm90(act, wt, M, L.K, L.N, nullptr, y, s, cluster, persistent); }),
            };
            const double own_wgrad =
                bench::best_window_ms(s, reps, [&] { cuda::fp8_gemm_nt_accumulate_sm90(act, act, L.N, L.K, M, dw, s, cluster, persistent); });
            std::printf("{\"what\": \"own_sm90\", \"layer\": \"%s\", \"gemm\": \"wgrad\", \"cluster\": %d, "
                        "\"persistent\": %d, \"cublaslt_ms\": %.4f, \"own_ms\": %.4f, \"own_tflops\": %.0f, "
                        "\"own_speedup\": %.3f}\n",
                        L.name, cluster, int(persistent), t[5], own_wgrad, flops / (own_wgrad * 1e-3) / 1e12,
                        t[5] / own_wgrad);
            for (int g = 0; g < 2; ++g)
              std::printf("{\"what\": \"own_sm90\", \"layer\": \"%s\", \"gemm\": \"%s\", \"cluster\": %d, "
                          "\"persistent\": %d, \"cublaslt_ms\": %.4f, \"own_ms\": %.4f, \"cublaslt_tflops\": %.0f, "
                          "\"own_tflops\": %.0f, \"own_speedup\": %.3f}\n",
                          L.name, gemm[g], cluster, int(persistent), t[2 * g + 1], own[g],
                          flops / (t[2 * g + 1] * 1e-3) / 1e12, flops / (own[g] * 1e-3) / 1e12, t[2 * g + 1] / own[g]);
          } catch (const std::exception& e) {  // one way of running it failed: say so, try the others
            std::printf("{\"what\": \"own_sm90_error\", \"layer\": \"%s\", \"cluster\": %d, \"persistent\": %d, "
                        "\"error\": \"%s\"}\n",
                        L.name, cluster, int(persistent), e.what());
          }
        }
      }
    }
    // act_quantize at each width: rows only (forward), rows + cols (an output
    // gradient), cols only (an input's transpose), GELU + bias + rows (fc).
    cuda::Fp8Linear lin(s);
    lin.reserve(M, 4 * C);
    const cuda::Fp8Slot r = lin.slot(cuda::Fp8Linear::kRows), c = lin.slot(cuda::Fp8Linear::kCols);
    struct Q {
      const char* name;
      int N;
      cuda::ActQuant q;
      double bytes_per_elem;  // read + written
    };
    const Q qs[] = {
        {"rows", C, {.x = x, .rows = r}, 2 + 1},
        {"rows+cols", C, {.x = x, .rows = r, .cols = c}, 2 + 2},
        {"rows+cols", 4 * C, {.x = x, .rows = r, .cols = c}, 2 + 2},
        {"cols", 4 * C, {.x = x, .cols = c}, 2 + 1},
        {"bias+gelu+rows (fc)", 4 * C, {.x = x, .bias = w, .biased = y, .op = cuda::ActOp::Gelu, .rows = r}, 2 + 2 + 1},
        {"dgelu+rows+cols", 4 * C, {.x = x, .op = cuda::ActOp::GeluGrad, .aux = x, .out = y, .rows = r, .cols = c},
         2 + 2 + 2 + 2},
    };
    for (const Q& q : qs) {
      const double ms = bench::best_window_ms(s, reps, [&] { cuda::act_quantize(q.q, M, q.N, s); });
      const double bytes = q.bytes_per_elem * M * q.N;
      std::printf("{\"what\": \"act_quantize\", \"op\": \"%s\", \"M\": %d, \"N\": %d, \"ms\": %.4f, \"gb_s\": %.0f, "
                  "\"of_copy\": %.2f}\n",
                  q.name, M, q.N, ms, bytes / (ms * 1e-3) / 1e9, bytes / (ms * 1e-3) / 1e9 / copy_gbs);
    }
    // fc's forward: the GEMM then act_quantize's bias + GELU + rows + cols (through cuBLASLt or the
    // own GEMM), against the own GEMM with that work in its epilogue (fp8_gemm_gelu_quant_sm90).
    if (M % 128 == 0 && cuda::fp8_gemm_sm90_supported(M, 4 * C, C)) {
      const int N = 4 * C, K = C;
      const cuda::ActQuant gelu{.x = y, .bias = w, .biased = y, .op = cuda::ActOp::Gelu, .rows = r, .cols = c};
      const double lt = bench::best_window_ms(s, reps, [&] {
        f8.fprop(act, wt, M, N, K, y);
        cuda::act_quantize(gelu, M, N, s);
      });
      const double own = bench::best_window_ms(s, reps, [&] {
        cuda::fp8_gemm_nt_sm90(act, wt, M, N, K, nullptr, y, s);
        cuda::act_quantize(gelu, M, N, s);
      });
      const double fused = bench::best_window_ms(s, reps, [&] {
        cuda::fp8_gemm_gelu_quant_sm90(act, wt, M, N, K, w, {y, r.codes, r.scales, c.codes, c.scales}, s);
      });
      std::printf("{\"what\": \"fc_forward\", \"M\": %d, \"N\": %d, \"K\": %d, \"cublaslt_then_quantize_ms\": %.4f, "
                  "\"own_then_quantize_ms\": %.4f, \"own_fused_ms\": %.4f, \"fused_speedup\": %.3f}\n",
                  M, N, K, lt, own, fused, lt / fused);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpubench_fp8_linear: %s\n", e.what());
    return 1;
  }
  return 0;
}
