// CPU throughput of the block quantizers (quant.h), in bytes moved per second
// (fp32 in + codes + scales out, or the reverse).
//   bench_quant [--benchmark_filter=...]
#if __has_include(<benchmark/benchmark.h>)
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "formats/quant.h"

namespace {

using namespace mxdp;

constexpr int64_t kCols = 4096;

std::vector<float> input(int64_t n) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> x(n);
  for (auto& v : x) v = std::ldexp(nd(rng), int(rng() % 16) - 8);
  return x;
}

void BM_Mxfp8QuantizeRowwise(benchmark::State& st) {
  const int64_t rows = st.range(0), n = rows * kCols;
  const auto x = input(n);
  std::vector<uint8_t> codes(n), scales(n / 32);
  for (auto _ : st) {
    mxfp8_quantize_rowwise(x.data(), rows, kCols, {}, codes.data(), scales.data());
    benchmark::DoNotOptimize(codes.data());
  }
  st.SetBytesProcessed(st.iterations() * (5 * n + n / 32));
}
void BM_Mxfp8DequantizeRowwise(benchmark::State& st) {
  const int64_t rows = st.range(0), n = rows * kCols;
  const auto x = input(n);
  std::vector<uint8_t> codes(n), scales(n / 32);
  std::vector<float> y(n);
  mxfp8_quantize_rowwise(x.data(), rows, kCols, {}, codes.data(), scales.data());
  for (auto _ : st) {
    mxfp8_dequantize_rowwise(codes.data(), scales.data(), rows, kCols, Fp8Kind::E4M3, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(st.iterations() * (5 * n + n / 32));
}
void BM_Mxfp8QuantizeColwise(benchmark::State& st) {
  const int64_t rows = st.range(0), n = rows * kCols;
  const auto x = input(n);
  std::vector<uint8_t> codes(n), scales(n / 32);
  for (auto _ : st) {
    mxfp8_quantize_colwise(x.data(), rows, kCols, {}, codes.data(), scales.data());
    benchmark::DoNotOptimize(codes.data());
  }
  st.SetBytesProcessed(st.iterations() * (5 * n + n / 32));
}
void BM_Nvfp4Quantize(benchmark::State& st) {
  const int64_t rows = st.range(0), n = rows * kCols;
  const auto x = input(n);
  const float am = amax(x.data(), n);
  std::vector<uint8_t> codes(n / 2), scales(n / 16);
  for (auto _ : st) {
    nvfp4_quantize_rowwise(x.data(), rows, kCols, am, codes.data(), scales.data());
    benchmark::DoNotOptimize(codes.data());
  }
  st.SetBytesProcessed(st.iterations() * (4 * n + n / 2 + n / 16));
}
void BM_Nvfp4Dequantize(benchmark::State& st) {
  const int64_t rows = st.range(0), n = rows * kCols;
  const auto x = input(n);
  const float am = amax(x.data(), n);
  std::vector<uint8_t> codes(n / 2), scales(n / 16);
  std::vector<float> y(n);
  nvfp4_quantize_rowwise(x.data(), rows, kCols, am, codes.data(), scales.data());
  const float s_dec = nvfp4_tensor_scale(am).s_dec;
  for (auto _ : st) {
    nvfp4_dequantize_rowwise(codes.data(), scales.data(), s_dec, rows, kCols, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(st.iterations() * (4 * n + n / 2 + n / 16));
}
void BM_Amax(benchmark::State& st) {
  const int64_t n = st.range(0) * kCols;
  const auto x = input(n);
  for (auto _ : st) benchmark::DoNotOptimize(amax(x.data(), n));
  st.SetBytesProcessed(st.iterations() * 4 * n);
}

BENCHMARK(BM_Mxfp8QuantizeRowwise)->Arg(256)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Mxfp8DequantizeRowwise)->Arg(256)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Mxfp8QuantizeColwise)->Arg(256)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Nvfp4Quantize)->Arg(256)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Nvfp4Dequantize)->Arg(256)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Amax)->Arg(256)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
#else
#include <cstdio>
int main() {
  std::puts("bench_quant: built without Google Benchmark (benchmark/benchmark.h not found)");
  return 0;
}
#endif
