// CUDA kernels vs the CPU reference, bit for bit: codes, scales and
// dequantized floats on the same inputs (mismatch counts must be 0), for every
// format, both scale roundings, row-wise and column-wise, uneven shapes,
// misaligned pointers (general kernels) and special values. Also: the
// device-compiled codecs of formats.h against the GPU's own conversion
// instructions over all 2^32 fp32 inputs. Skips without a GPU.
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "formats/cuda/bf16_pack.cuh"
#include "formats/cuda/quant_cuda.h"
#include "util/cuda_check.h"
#include "formats/codec.h"
#include "formats/quant.h"
#include "gpu_test_util.h"

namespace {

using namespace mxdp;


// Device buffer with `pad` extra bytes so that tests can offset the pointer.
struct Dev {
  char* p = nullptr;
  explicit Dev(size_t bytes) { MXDP_CUDA_CHECK(cudaMalloc(&p, bytes + 64)); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  template <class T> T* as(size_t byte_offset = 0) { return reinterpret_cast<T*>(p + byte_offset); }
};
template <class T> void upload(T* d, const std::vector<T>& h) {
  MXDP_CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}
template <class T> std::vector<T> download(const T* d, size_t n) {
  std::vector<T> h(n);
  MXDP_CUDA_CHECK(cudaDeviceSynchronize());
  MXDP_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}
template <class T> int64_t mismatches(const std::vector<T>& a, const std::vector<T>& b) {
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) bad += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return bad + int64_t(a.size() != b.size());
}

float bits_f(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::vector<float> make_input(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(size_t(rows * cols));
  int e = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (i % 16 == 0) e = int(rng() % 61) - 30;
    x[i] = std::ldexp(nd(rng), e);
  }
  const float sp[] = {NAN, -NAN, INFINITY, -INFINITY, -0.0f, bits_f(1), bits_f(0x807FFFFFu), FLT_MAX,
                      -FLT_MAX, 448.0f, 464.0f, 57344.0f, bits_f(0x3FE00001u), bits_f(0x3FDFFFFFu)};
  for (size_t i = 0; i < x.size() / 64 + 1; ++i) x[rng() % x.size()] = sp[rng() % std::size(sp)];
  if (x.size() >= 256) {  // a zero block and an all-NaN block
    for (int i = 0; i < 32; ++i) x[i] = 0.0f;
    for (int i = 64; i < 96; ++i) x[i] = NAN;
  }
  return x;
}
std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (auto& v : b) v = uint8_t(rng());
  return b;
}

const int64_t kShapes[][2] = {{1, 16}, {1, 1}, {65, 80}, {993, 512}, {3, 33}, {31, 1},
                              {7, 1000}, {128, 4096}, {1, (1 << 20) + 32}, {77, 96}};

// ---- codecs: all 2^32 inputs against the hardware ------------------------------------
constexpr int kCodecChecks = 5;  // the mismatch counters codec_sweep keeps, in the order the test names them
__global__ void codec_sweep(unsigned long long* bad) {
  unsigned long long local[kCodecChecks] = {};
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (uint64_t(1) << 32); i += stride) {
    const float x = __uint_as_float(uint32_t(i));
    local[0] += codec::e4m3_from_f32(x) != __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
    local[1] += codec::e5m2_from_f32(x) != __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
    const uint8_t e2m1 = __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest);
    local[2] += (codec::e2m1_from_f32(x) != e2m1) + (codec::e2m1_from_f32_generic(x) != e2m1);
    const uint16_t ours = codec::bf16_from_f32(x);
    const uint16_t hw = __bfloat16_as_ushort(__float2bfloat16_rn(x));
    const bool nan = (uint32_t(i) & 0x7FFFFFFFu) > 0x7F800000u;
    local[3] += nan ? !((ours & 0x7FFF) > 0x7F80 && (hw & 0x7FFF) > 0x7F80) : ours != hw;
    // The hardware pair with the codec's NaN bits: x with a bijective partner, and with -x
    // (opposite infinities, NaN pairs).
    const float y = __uint_as_float(uint32_t(i) * 2654435761u);
    const auto pair = [](float a, float b) {
      return uint32_t(codec::bf16_from_f32(a)) | (uint32_t(codec::bf16_from_f32(b)) << 16);
    };
    local[4] += (cuda::device::bf16x2_rn(x, y) != pair(x, y)) + (cuda::device::bf16x2_rn(-x, x) != pair(-x, x));
  }
  for (int k = 0; k < kCodecChecks; ++k)
    if (local[k]) atomicAdd(&bad[k], local[k]);  // integer counts: order-free
}

TEST(GpuCodecs, AllFp32InputsMatchHardwareConversions) {
  REQUIRE_GPU();
  Dev d(kCodecChecks * sizeof(unsigned long long));
  MXDP_CUDA_CHECK(cudaMemset(d.p, 0, kCodecChecks * sizeof(unsigned long long)));
  codec_sweep<<<4096, 256>>>(d.as<unsigned long long>());
  MXDP_CUDA_CHECK_LAUNCH();
  const auto bad = download(d.as<unsigned long long>(), kCodecChecks);
  EXPECT_EQ(bad[0], 0u) << "E4M3 vs cvt.rn.satfinite.e4m3x2.f32";
  EXPECT_EQ(bad[1], 0u) << "E5M2 vs cvt.rn.satfinite.e5m2x2.f32";
  EXPECT_EQ(bad[2], 0u) << "E2M1 vs __nv_cvt_float_to_fp4";
  EXPECT_EQ(bad[3], 0u) << "BF16 vs cvt.rn.bf16.f32";
  EXPECT_EQ(bad[4], 0u) << "device::bf16x2_rn vs codec::bf16_from_f32, NaN bits included";
}

// ---- MXFP8 ---------------------------------------------------------------------------
void compare_mxfp8_rowwise(int64_t rows, int64_t cols, Mxfp8Config cfg,
                           cuda::detail::Fp8Encoder enc, size_t x_offset, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << rows << "x" << cols << " e5m2=" << (cfg.elem == Fp8Kind::E5M2)
                                  << " floor=" << (cfg.rounding == ScaleRounding::Floor)
                                  << " hw=" << (enc == cuda::detail::Fp8Encoder::Hardware)
                                  << " x_offset=" << x_offset);
  const int64_t n = rows * cols, ns = mxfp8_scale_bytes_rowwise(rows, cols);
  const auto x = make_input(rows, cols, seed);
  std::vector<uint8_t> codes(n), scales(ns);
  std::vector<float> y(n);
  mxfp8_quantize_rowwise(x.data(), rows, cols, cfg, codes.data(), scales.data());
  mxfp8_dequantize_rowwise(codes.data(), scales.data(), rows, cols, cfg.elem, y.data());

  Dev dx(n * 4), dc(n), ds(ns), dy(n * 4);
  float* px = dx.as<float>(x_offset);
  upload(px, x);
  cuda::detail::mxfp8_quantize_rowwise(px, rows, cols, cfg, dc.as<uint8_t>(), ds.as<uint8_t>(), enc, 0);
  EXPECT_EQ(mismatches(download(dc.as<uint8_t>(), n), codes), 0) << "codes";
  EXPECT_EQ(mismatches(download(ds.as<uint8_t>(), ns), scales), 0) << "scales";
  // Dequantize the CPU's codes on the GPU (and arbitrary bytes, NaN codes and 0xFF scales included).
  upload(dc.as<uint8_t>(), codes);
  upload(ds.as<uint8_t>(), scales);
  float* py = dy.as<float>(x_offset);
  cuda::mxfp8_dequantize_rowwise(dc.as<uint8_t>(), ds.as<uint8_t>(), rows, cols, cfg.elem, py, 0);
  EXPECT_EQ(mismatches(download(py, n), y), 0) << "dequantized floats";
  const auto rc = random_bytes(n, seed + 1), rs = random_bytes(ns, seed + 2);
  mxfp8_dequantize_rowwise(rc.data(), rs.data(), rows, cols, cfg.elem, y.data());
  upload(dc.as<uint8_t>(), rc);
  upload(ds.as<uint8_t>(), rs);
  cuda::mxfp8_dequantize_rowwise(dc.as<uint8_t>(), ds.as<uint8_t>(), rows, cols, cfg.elem, py, 0);
  EXPECT_EQ(mismatches(download(py, n), y), 0) << "dequantized floats of random bytes";
}

TEST(GpuMxfp8, RowwiseBitwiseEqualToCpu) {
  REQUIRE_GPU();
  uint32_t seed = 1;
  for (auto [rows, cols] : kShapes)
    for (Fp8Kind k : {Fp8Kind::E4M3, Fp8Kind::E5M2})
      for (ScaleRounding r : {ScaleRounding::RCeil, ScaleRounding::Floor})
        for (auto enc : {cuda::detail::Fp8Encoder::Integer, cuda::detail::Fp8Encoder::Hardware})
          compare_mxfp8_rowwise(rows, cols, {k, r}, enc, 0, seed++);
  // Misaligned fp32 pointers take the general kernel on shapes that would be vectorized.
  compare_mxfp8_rowwise(128, 4096, {}, cuda::detail::kDefaultEncoder, 4, seed++);
  compare_mxfp8_rowwise(33, 64, {Fp8Kind::E5M2, ScaleRounding::Floor}, cuda::detail::kDefaultEncoder, 4, seed++);
}

TEST(GpuMxfp8, PublicEntryPointUsesDefaultEncoder) {
  REQUIRE_GPU();
  const int64_t rows = 64, cols = 2048, n = rows * cols;
  const auto x = make_input(rows, cols, 42);
  std::vector<uint8_t> codes(n), scales(n / 32);
  mxfp8_quantize_rowwise(x.data(), rows, cols, {}, codes.data(), scales.data());
  Dev dx(n * 4), dc(n), ds(n / 32);
  upload(dx.as<float>(), x);
  cuda::mxfp8_quantize_rowwise(dx.as<float>(), rows, cols, {}, dc.as<uint8_t>(), ds.as<uint8_t>(), 0);
  EXPECT_EQ(mismatches(download(dc.as<uint8_t>(), n), codes), 0);
  EXPECT_EQ(mismatches(download(ds.as<uint8_t>(), n / 32), scales), 0);
}

TEST(GpuMxfp8, ColwiseBitwiseEqualToCpu) {
  REQUIRE_GPU();
  uint32_t seed = 300;
  for (auto [rows, cols] : kShapes) {
    if (rows == 1 && cols > 100000) continue;
    for (Fp8Kind k : {Fp8Kind::E4M3, Fp8Kind::E5M2})
      for (ScaleRounding r : {ScaleRounding::RCeil, ScaleRounding::Floor}) {
        SCOPED_TRACE(testing::Message() << rows << "x" << cols << " e5m2=" << (k == Fp8Kind::E5M2)
                                        << " floor=" << (r == ScaleRounding::Floor));
        const int64_t n = rows * cols, ns = mxfp8_scale_bytes_colwise(rows, cols);
        const auto x = make_input(rows, cols, seed++);
        std::vector<uint8_t> codes(n), scales(ns);
        std::vector<float> y(n);
        mxfp8_quantize_colwise(x.data(), rows, cols, {k, r}, codes.data(), scales.data());
        mxfp8_dequantize_colwise(codes.data(), scales.data(), rows, cols, k, y.data());
        Dev dx(n * 4), dc(n), ds(ns), dy(n * 4);
        upload(dx.as<float>(), x);
        cuda::mxfp8_quantize_colwise(dx.as<float>(), rows, cols, {k, r}, dc.as<uint8_t>(), ds.as<uint8_t>(), 0);
        EXPECT_EQ(mismatches(download(dc.as<uint8_t>(), n), codes), 0) << "codes";
        EXPECT_EQ(mismatches(download(ds.as<uint8_t>(), ns), scales), 0) << "scales";
        upload(dc.as<uint8_t>(), codes);
        upload(ds.as<uint8_t>(), scales);
        cuda::mxfp8_dequantize_colwise(dc.as<uint8_t>(), ds.as<uint8_t>(), rows, cols, k, dy.as<float>(), 0);
        EXPECT_EQ(mismatches(download(dy.as<float>(), n), y), 0) << "dequantized floats";
      }
  }
}

// ---- NVFP4 ---------------------------------------------------------------------------
void compare_nvfp4(int64_t rows, int64_t cols, float amax_factor, bool device_amax, size_t x_offset,
                   uint32_t seed) {
  SCOPED_TRACE(testing::Message() << rows << "x" << cols << " amax x" << amax_factor
                                  << " device_amax=" << device_amax << " x_offset=" << x_offset);
  const int64_t n = rows * cols, nc = nvfp4_code_bytes(rows, cols), ns = nvfp4_scale_bytes(rows, cols);
  auto x = make_input(rows, cols, seed);
  for (float& v : x)
    if (std::isinf(v)) v = std::copysign(1e30f, v);
  const float am = amax(x.data(), n) * amax_factor;
  std::vector<uint8_t> codes(nc), scales(ns);
  std::vector<float> y(n);
  nvfp4_quantize_rowwise(x.data(), rows, cols, am, codes.data(), scales.data());
  const Nvfp4TensorScale ts = nvfp4_tensor_scale(am);
  nvfp4_dequantize_rowwise(codes.data(), scales.data(), ts.s_dec, rows, cols, y.data());

  Dev dx(n * 4), dc(nc), ds(ns), dy(n * 4), da(sizeof(Nvfp4TensorScale) + 4);
  float* px = dx.as<float>(x_offset);
  upload(px, x);
  if (device_amax) {
    cuda::amax(px, n, da.as<float>(), 0);
    EXPECT_EQ(download(da.as<float>(), 1)[0], amax(x.data(), n)) << "device amax";
    if (amax_factor != 1.0f) upload(da.as<float>(), std::vector<float>{am});
    cuda::nvfp4_quantize_rowwise_device_amax(px, rows, cols, da.as<float>(), dc.as<uint8_t>(), ds.as<uint8_t>(), 0);
  } else {
    cuda::nvfp4_quantize_rowwise(px, rows, cols, am, dc.as<uint8_t>(), ds.as<uint8_t>(), 0);
  }
  EXPECT_EQ(mismatches(download(dc.as<uint8_t>(), nc), codes), 0) << "codes";
  EXPECT_EQ(mismatches(download(ds.as<uint8_t>(), ns), scales), 0) << "scales";
  upload(dc.as<uint8_t>(), codes);
  upload(ds.as<uint8_t>(), scales);
  float* py = dy.as<float>(x_offset);
  if (device_amax) {
    Dev dts(sizeof(Nvfp4TensorScale));
    upload(da.as<float>(), std::vector<float>{am});
    cuda::nvfp4_tensor_scale(da.as<float>(), dts.as<Nvfp4TensorScale>(), 0);
    const auto gts = download(dts.as<Nvfp4TensorScale>(), 1)[0];
    EXPECT_EQ(std::memcmp(&gts, &ts, sizeof(ts)), 0) << "tensor scale";
    cuda::nvfp4_dequantize_rowwise_device_sdec(dc.as<uint8_t>(), ds.as<uint8_t>(), &dts.as<Nvfp4TensorScale>()->s_dec,
                                               rows, cols, py, 0);
    EXPECT_EQ(mismatches(download(py, n), y), 0) << "dequantized floats";
  } else {
    cuda::nvfp4_dequantize_rowwise(dc.as<uint8_t>(), ds.as<uint8_t>(), ts.s_dec, rows, cols, py, 0);
    EXPECT_EQ(mismatches(download(py, n), y), 0) << "dequantized floats";
  }
  const auto rc = random_bytes(nc, seed + 1), rs = random_bytes(ns, seed + 2);
  nvfp4_dequantize_rowwise(rc.data(), rs.data(), ts.s_dec, rows, cols, y.data());
  upload(dc.as<uint8_t>(), rc);
  upload(ds.as<uint8_t>(), rs);
  cuda::nvfp4_dequantize_rowwise(dc.as<uint8_t>(), ds.as<uint8_t>(), ts.s_dec, rows, cols, py, 0);
  EXPECT_EQ(mismatches(download(py, n), y), 0) << "dequantized floats of random bytes";
}

TEST(GpuNvfp4, BitwiseEqualToCpu) {
  REQUIRE_GPU();
  uint32_t seed = 700;
  for (auto [rows, cols] : kShapes)
    for (float f : {1.0f, 4.0f, 0.25f})
      for (bool dev : {false, true}) compare_nvfp4(rows, cols, f, dev, 0, seed++);
  compare_nvfp4(128, 4096, 1.0f, false, 4, seed++);  // misaligned: general kernels
  compare_nvfp4(5, 48, 1.0f, true, 4, seed++);
}

TEST(GpuAmax, MatchesCpu) {
  REQUIRE_GPU();
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(33), int64_t(1) << 22}) {
    const auto x = make_input(1, std::max<int64_t>(n, 1), uint32_t(n));
    Dev dx(x.size() * 4 + 16), da(4);
    for (size_t off : {size_t(0), size_t(4)}) {
      upload(dx.as<float>(off), x);
      cuda::amax(dx.as<float>(off), n, da.as<float>(), 0);
      EXPECT_EQ(download(da.as<float>(), 1)[0], amax(x.data(), n)) << n << " offset " << off;
    }
  }
}

TEST(GpuApi, RejectsBadArguments) {
  REQUIRE_GPU();
  EXPECT_THROW(cuda::mxfp8_quantize_rowwise(nullptr, 4, 32, {}, nullptr, nullptr, 0), Error);
  EXPECT_THROW(cuda::nvfp4_quantize_rowwise(nullptr, -1, 16, 1.0f, nullptr, nullptr, 0), Error);
  float* d = nullptr;
  MXDP_CUDA_CHECK(cudaMalloc(&d, 64));
  EXPECT_THROW(cuda::nvfp4_quantize_rowwise(d, 1, 16, NAN, reinterpret_cast<uint8_t*>(d),
                                            reinterpret_cast<uint8_t*>(d), 0), Error);
  cudaFree(d);
}

}  // namespace
