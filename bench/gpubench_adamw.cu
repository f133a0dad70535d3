// The fused AdamW + stage (EngineOps::adamw_quantize / adamw_amax) on one GPU,
// for GPT-2 124M's parameter count in fp32, against the device's own copy
// bandwidth measured in the same run. Prints one JSON line per measurement
// (bench/compare_adamw.sh sets them beside PyTorch's fused AdamW + a compiled
// MXFP8 quantize, bench/torch_adamw.py):
//   {"system":"mxdp","what":"copy",...}          cudaMemcpy D2D, bytes read + written per second
//   {"system":"mxdp","what":"fused","format":F,"unroll":U,...}   one pass (nvfp4: AdamW + amax, then quantize)
//   {"system":"mxdp","what":"separate",...}      adamw then quantize (two passes), for comparison
//   {"system":"mxdp","what":"fused"|"fused-variant"|"separate","format":"fp8b128","min_blocks":B,...}
//                                                 fp8b128 over a cols-1600 matrix: one pass
//                                                 (adamw_tile_quant, B CTAs an SM) or AdamW, then the
//                                                 tile quantize
//   {"system":"mxdp","what":"fused-per-run"|"fused-ranges",...}   bf16/mxfp8 over GPT-2's decay runs:
//                                                 a launch per run, or one adamw_quantize_ranges
//   ./build/bench/gpubench_adamw [params (0: GPT-2 124M, 124475904)] [iters=50]
// Bytes per param: read g, m, v, p (16), write m, v, p (12), plus the payload:
// bf16 2; mxfp8 1 + 1/32; nvfp4 reads p again (4) and writes 1/2 + 1/16;
// fp8b128 1 + 1/4096 in one pass, and reads p again (4) in two.
// floor_ms = bytes / copy bandwidth.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "engine/cuda/engine_ops_cuda.h"
#include "util/cuda_check.h"
#include "models/gpt2/gpt.h"
#include "engine/optimizer.h"
#include "formats/fp8_block.h"
#include "util/check.h"

using namespace mxdp;

namespace {

__global__ void init_kernel(float* x, int64_t n, uint32_t seed, float scale, bool square) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    const float u = (float(h & 0xFFFFFF) / float(0x1000000) - 0.5f) * 2.0f * scale;
    x[i] = square ? u * u : u;
  }
}
void init(float* x, int64_t n, uint32_t seed, float scale, bool square = false) {
  init_kernel<<<4096, 256>>>(x, n, seed, scale, square);
  MXDP_CUDA_CHECK_LAUNCH();
}

// Median over `reps` of the mean time of `iters` back-to-back calls, in ms.
double time_ms(cudaStream_t st, int iters, const std::function<void()>& fn, int reps = 7) {
  cudaEvent_t a, b;
  MXDP_CUDA_CHECK(cudaEventCreate(&a));
  MXDP_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) fn();  // warm-up
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    MXDP_CUDA_CHECK(cudaEventRecord(a, st));
    for (int i = 0; i < iters; ++i) fn();
    MXDP_CUDA_CHECK(cudaEventRecord(b, st));
    MXDP_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    MXDP_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(double(t) / iters);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const auto specs = gpt_param_specs(gpt_config("gpt2-124m"));
    int64_t gpt2 = 0;
    for (const auto& s : specs) gpt2 += s.numel();
    const int64_t n = argc > 1 && std::atoll(argv[1]) > 0 ? std::atoll(argv[1]) : gpt2;  // 0: GPT-2 124M
    const int iters = argc > 2 ? std::atoi(argv[2]) : 50;
    int dev = 0;
    cudaDeviceProp prop{};
    MXDP_CUDA_CHECK(cudaGetDevice(&dev));
    MXDP_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    cudaStream_t st;
    MXDP_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    auto ops = cuda::make_cuda_ops(st);

    // Device copy: one 2 GiB buffer onto another (read + write counted).
    double copy_tbs = 0;
    {
      const size_t bytes = size_t(2) << 30;
      void *src = nullptr, *dst = nullptr;
      MXDP_CUDA_CHECK(cudaMalloc(&src, bytes));
      MXDP_CUDA_CHECK(cudaMalloc(&dst, bytes));
      MXDP_CUDA_CHECK(cudaMemset(src, 1, bytes));
      const double ms = time_ms(st, 10, [&] { MXDP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st)); });
      copy_tbs = 2.0 * double(bytes) / (ms * 1e-3) / 1e12;
      std::printf("{\"system\":\"mxdp\",\"what\":\"copy\",\"device\":\"%s\",\"bytes\":%zu,\"ms\":%.4f,\"tb_per_s\":%.4f}\n",
                  prop.name, bytes, ms, copy_tbs);
      cudaFree(src);
      cudaFree(dst);
    }

    DeviceArray<float> p(*ops, n), m(*ops, n), v(*ops, n), g(*ops, n), amax(*ops, specs.size() + 1);
    DeviceArray<uint8_t> pay(*ops, size_t(2 * n + 256));
    MXDP_CUDA_CHECK(cudaDeviceSynchronize());
    init(p.data(), n, 1, 0.05f);
    init(m.data(), n, 2, 1e-3f);
    init(v.data(), n, 3, 1e-3f, true);
    init(g.data(), n, 4, 1.0f);
    MXDP_CUDA_CHECK(cudaDeviceSynchronize());
    // A small learning rate keeps the state finite over thousands of steps; the
    // work per element does not depend on the values.
    const AdamWParams a{1e-6f, 0.9f, 0.95f, 1e-8f, 0.1f, 10};
    const AdamWChoice sc = adamw_choice(a);
    // The engine's clipped step: g * coeff inside the pass, the scalars read
    // from device memory (StepControl).
    StepControl hc;
    hc.updates = a.t;
    hc.grad_scale = 0.5f;
    DeviceArray<StepControl> ctl(*ops, 1);
    ops->copy_from_host(ctl.data(), &hc, sizeof hc);
    const StepControl* clip = ctl.data();

    struct Fmt {
      const char* name;
      WeightFormat f;
      double payload_bytes;  // per param, beyond the 28 of AdamW
    };
    const Fmt fmts[] = {{"bf16", WeightFormat::Bf16, 2.0},
                        {"mxfp8", WeightFormat::Mxfp8, 1.0 + 1.0 / 32},
                        {"nvfp4", WeightFormat::Nvfp4, 4.0 + 0.5 + 1.0 / 16}};
    const int64_t code_bytes[] = {2 * n, n, n / 2};
    // One measurement's line: `knob` names the kernel variant's setting (unroll, min_blocks).
    auto report_of = [&](const char* what, const char* fmt, const char* knob, int knob_value, int64_t params,
                         double ms, double bytes_per_param) {
      const double bytes = bytes_per_param * double(params);
      const double floor_ms = bytes / (copy_tbs * 1e12) * 1e3;
      std::printf("{\"system\":\"mxdp\",\"what\":\"%s\",\"format\":\"%s\",\"%s\":%d,\"params\":%lld,"
                  "\"bytes_per_param\":%.5f,\"ms\":%.4f,\"tb_per_s\":%.4f,\"floor_ms\":%.4f,\"of_floor\":%.4f,"
                  "\"copy_tb_per_s\":%.4f}\n",
                  what, fmt, knob, knob_value, (long long)params, bytes_per_param, ms, bytes / (ms * 1e-3) / 1e12,
                  floor_ms, ms / floor_ms, copy_tbs);
      std::fflush(stdout);
    };
    auto report = [&](const char* what, const char* fmt, int unroll, double ms, double bytes_per_param) {
      report_of(what, fmt, "unroll", unroll, n, ms, bytes_per_param);
    };
    for (int k = 0; k < 3; ++k) {
      const Fmt& fm = fmts[k];
      uint8_t* codes = pay.data();
      uint8_t* scales = pay.data() + code_bytes[k];
      for (int u : {1, 2, 4}) {
        double ms;
        if (fm.f == WeightFormat::Nvfp4) {
          ms = time_ms(st, iters, [&] {
            ops->zero(amax.data(), sizeof(float));
            cuda::detail::adamw_amax(p.data(), m.data(), v.data(), g.data(), n, clip, sc, amax.data(), st, u);
            ops->quantize(fm.f, ScaleRounding::RCeil, p.data(), n, amax.data(), codes, scales);
          });
        } else {
          ms = time_ms(st, iters, [&] {
            cuda::detail::adamw_quantize(fm.f, ScaleRounding::RCeil, p.data(), m.data(), v.data(), g.data(), n, clip,
                                         sc, codes, scales, st, u);
          });
        }
        report(u == cuda::detail::kFusedUnroll ? "fused" : "fused-variant", fm.name, u, ms, 28.0 + fm.payload_bytes);
      }
      // What the engine did before: AdamW, then the quantize reading the masters again
      // (plus, for a clipped step, a pass scaling the grads: not counted here).
      const double sep = time_ms(st, iters, [&] {
        ops->adamw(p.data(), m.data(), v.data(), g.data(), n, a);
        if (fm.f == WeightFormat::Nvfp4) {
          ops->zero(amax.data(), sizeof(float));
          ops->amax_into(p.data(), n, amax.data());
          ops->quantize(fm.f, ScaleRounding::RCeil, p.data(), n, amax.data(), codes, scales);
        } else {
          ops->quantize(fm.f, ScaleRounding::RCeil, p.data(), n, nullptr, codes, scales);
        }
      });
      const double sep_bytes = 28.0 + 4.0 + (fm.f == WeightFormat::Nvfp4 ? 4.0 + 0.5 + 1.0 / 16 : fm.payload_bytes);
      report("separate", fm.name, 0, sep, sep_bytes);
    }
    // fp8b128: an (n / 1600) x 1600 matrix (gpt2-1558m's width, partial
    // tiles at the right edge), its 128x128 tiles.
    {
      const int64_t cols = 1600, rows = n / cols, nm = rows * cols;
      uint8_t* codes = pay.data();
      float* scales = reinterpret_cast<float*>(pay.data() + (nm + 15) / 16 * 16);
      const double tile_bytes = 1.0 + 4.0 / kFp8TileElems;
      auto report_tile = [&](const char* what, int min_blocks, double ms, double bytes_per_param) {
        report_of(what, "fp8b128", "min_blocks", min_blocks, nm, ms, bytes_per_param);
      };
      for (int b : {1, 2}) {
        const double ms = time_ms(st, iters, [&] {
          MXDP_CHECK(cuda::detail::adamw_tile_quant(p.data(), m.data(), v.data(), g.data(), rows, cols, clip, sc,
                                                    codes, scales, st, b),
                     "adamw_tile_quant refused the benchmark's aligned matrix");
        });
        report_tile(b == cuda::detail::kTileMinBlocks ? "fused" : "fused-variant", b, ms, 28.0 + tile_bytes);
      }
      const double sep = time_ms(st, iters, [&] {
        cuda::detail::adamw_amax(p.data(), m.data(), v.data(), g.data(), nm, clip, sc, amax.data(), st);
        ops->quantize(WeightFormat::Fp8b128, ScaleRounding::RCeil, p.data(), nm, nullptr, codes,
                      reinterpret_cast<uint8_t*>(scales), cols);
      });
      report_tile("separate", 0, sep, 28.0 + 4.0 + tile_bytes);
    }
    // NVFP4 as the engine stages a GPT-2: one tensor amax per param, so the
    // quantize pass of each param follows its AdamW pass (and finds the masters
    // it just wrote in L2 when the param fits there).
    {
      const double ms = time_ms(st, iters, [&] {
        ops->zero(amax.data(), specs.size() * sizeof(float));
        int64_t at = 0;
        for (size_t i = 0; i < specs.size() && at < n; ++i) {
          const int64_t len = std::min<int64_t>(specs[i].numel(), n - at);
          cuda::detail::adamw_amax(p.data() + at, m.data() + at, v.data() + at, g.data() + at, len, clip, sc,
                                   amax.data() + i, st);
          ops->quantize(WeightFormat::Nvfp4, ScaleRounding::RCeil, p.data() + at, len, amax.data() + i, pay.data() + at / 2,
                        pay.data() + n / 2 + at / 16);
          at += len;
        }
      });
      report("fused-per-param", "nvfp4", cuda::detail::kFusedUnroll, ms, 28.0 + 4.0 + 0.5 + 1.0 / 16);
    }
    // bf16 and MXFP8 as the engine stages a GPT-2 shard: its params in order,
    // cut into runs of equal weight decay. One adamw_quantize per run (what
    // BucketSync did) against one adamw_quantize_ranges for the whole shard.
    {
      std::vector<AdamWRange> runs;
      int64_t at = 0;
      for (size_t i = 0; i < specs.size() && at < n; ++i) {
        const int64_t len = std::min<int64_t>(specs[i].numel(), n - at);
        const int32_t choice = specs[i].decay ? 1 : 0;
        if (!runs.empty() && runs.back().choice == choice)
          runs.back().len += len;
        else
          runs.push_back({at, len, choice});
        at += len;
      }
      const AdamWChoice choices[2] = {adamw_choice(AdamWParams{a.lr, a.beta1, a.beta2, a.eps, 0.0f, a.t}), sc};
      for (int k = 0; k < 2; ++k) {
        const Fmt& fm = fmts[k];
        uint8_t* codes = pay.data();
        uint8_t* scales = pay.data() + code_bytes[k];
        const FormatTraits& ft = format_traits(fm.f);
        const double per_run = time_ms(st, iters, [&] {
          for (const AdamWRange& r : runs)
            cuda::detail::adamw_quantize(fm.f, ScaleRounding::RCeil, p.data() + r.begin, m.data() + r.begin,
                                         v.data() + r.begin, g.data() + r.begin, r.len, clip, choices[r.choice],
                                         codes + ft.code_bytes(r.begin), scales + ft.scales_bytes(r.begin), st);
        });
        report("fused-per-run", fm.name, cuda::detail::kFusedUnroll, per_run, 28.0 + fm.payload_bytes);
        const auto table = ops->adamw_ranges(fm.f, runs);
        const double one = time_ms(st, iters, [&] {
          ops->adamw_quantize_ranges(ScaleRounding::RCeil, p.data(), m.data(), v.data(), g.data(), clip, choices,
                                     *table, codes, scales);
        });
        report("fused-ranges", fm.name, cuda::detail::kFusedUnroll, one, 28.0 + fm.payload_bytes);
      }
      std::printf("{\"system\":\"mxdp\",\"what\":\"runs\",\"count\":%zu}\n", runs.size());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpubench_adamw: %s\n", e.what());
    return 1;
  }
}
