// The CPU implementation of EngineOps: host memory, the quant.h reference
// quantizers, sequential reductions.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "util/check.h"
#include "engine/engine_ops.h"
#include "formats/codec.h"
#include "formats/fp8_block.h"
#include "formats/quant.h"

namespace mxdp {

namespace {

class CpuOps final : public EngineOps {
 public:
  bool device_memory() const override { return false; }
  void* alloc(size_t bytes) override {
    if (!bytes) return nullptr;
    void* p = std::calloc(1, bytes);
    MXDP_CHECK(p, "out of host memory allocating ", bytes, " bytes");
    return p;
  }
  void release(void* p) override { std::free(p); }
  void zero(void* p, size_t bytes) override {
    if (bytes) std::memset(p, 0, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void copy_to_host(void* host, const void* src, size_t bytes) override { copy(host, src, bytes); }
  void copy_from_host(void* dst, const void* host, size_t bytes) override { copy(dst, host, bytes); }
  float amax(const float* x, int64_t n) override { return mxdp::amax(x, n); }

  void quantize(WeightFormat f, ScaleRounding r, const float* x, int64_t n, const float* tensor_amax,
                uint8_t* codes, uint8_t* scales, int64_t cols) override {
    check_tensor_amax(f, tensor_amax, "quantize");
    check_slab_range(f, n, cols, "quantize");
    switch (f) {
      case WeightFormat::Bf16: to_bf16(x, reinterpret_cast<uint16_t*>(codes), n); break;
      case WeightFormat::Mxfp8: mxfp8_quantize_rowwise(x, 1, n, {Fp8Kind::E4M3, r}, codes, scales); break;
      case WeightFormat::Nvfp4: nvfp4_quantize_rowwise(x, 1, n, *tensor_amax, codes, scales); break;
      case WeightFormat::Fp8b128:
        fp8b128_quantize(x, n / cols, cols, codes, reinterpret_cast<float*>(scales));
        break;
    }
  }
  void dequantize(WeightFormat f, const uint8_t* codes, const uint8_t* scales, int64_t n, const float* tensor_amax,
                  void* out, ComputeDType dt, int64_t cols) override {
    check_tensor_amax(f, tensor_amax, "dequantize");
    check_slab_range(f, n, cols, "dequantize");
    if (dt == ComputeDType::BF16) {
      std::vector<float> tmp(size_t(std::max<int64_t>(n, 0)));
      dequantize(f, codes, scales, n, tensor_amax, tmp.data(), ComputeDType::F32, cols);
      to_bf16(tmp.data(), static_cast<uint16_t*>(out), n);
      return;
    }
    float* y = static_cast<float*>(out);
    switch (f) {
      case WeightFormat::Bf16: from_bf16(reinterpret_cast<const uint16_t*>(codes), y, n); break;
      case WeightFormat::Mxfp8: mxfp8_dequantize_rowwise(codes, scales, 1, n, Fp8Kind::E4M3, y); break;
      case WeightFormat::Nvfp4:
        nvfp4_dequantize_rowwise(codes, scales, nvfp4_tensor_scale(*tensor_amax).s_dec, 1, n, y);
        break;
      case WeightFormat::Fp8b128:
        fp8b128_dequantize(codes, reinterpret_cast<const float*>(scales), n / cols, cols, y);
        break;
    }
  }
  void dequantize_pieces(WeightFormat f, const UnpackPiece* pieces, int count, int64_t, ComputeDType out) override {
    for (int i = 0; i < count; ++i) {
      const UnpackPiece& pc = pieces[i];
      dequantize(f, pc.codes, pc.scales, pc.len, pc.amax, pc.dst, out, pc.cols);
    }
  }
  void to_bf16(const float* x, uint16_t* y, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) y[i] = codec::bf16_from_f32(x[i]);
  }
  void from_bf16(const uint16_t* x, float* y, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) y[i] = codec::bf16_to_f32(x[i]);
  }
  void scale(float* x, int64_t n, float c) override {
    for (int64_t i = 0; i < n; ++i) x[i] *= c;
  }
  double sum_squares(const float* x, int64_t n) override {
    double s = 0;  // fixed, sequential order: the parity contract depends on it
    for (int64_t i = 0; i < n; ++i) s += double(x[i]) * double(x[i]);
    return s;
  }
  void sum_squares_into(const float* x, int64_t n, double* out) override { *out = sum_squares(x, n); }
  void adamw(float* p, float* m, float* v, const float* g, int64_t n, const AdamWParams& a) override {
    adamw_update(p, m, v, g, n, a);
  }

  void step_control(const double* partials, int rows, int stride, int cols, double clip_grad,
                    StepControl* ctl) override {
    step_control_of(partials, rows, stride, cols, clip_grad, *ctl);
  }
  // The reference of the fused ops: exactly the separate ops, in order.
  void adamw_scaled(float* p, float* m, float* v, const float* g, int64_t n, const StepControl* ctl,
                    const AdamWChoice& a) {
    if (ctl->skip) return;
    const AdamWScalars s = adamw_pick(a, ctl->updates);
    const float gs = ctl->grad_scale;
    for (int64_t i = 0; i < n; ++i) adamw_element(p[i], m[i], v[i], g[i] * gs, s);
  }
  void adamw_quantize(WeightFormat f, ScaleRounding r, float* p, float* m, float* v, const float* g, int64_t n,
                      const StepControl* ctl, const AdamWChoice& a, uint8_t* codes, uint8_t* scales,
                      int64_t cols) override {
    MXDP_CHECK(!format_traits(f).tensor_amax, "adamw_quantize: ", to_string(f),
               " needs the tensor amax first (adamw_amax, then quantize)");
    check_slab_range(f, n, cols, "adamw_quantize");
    adamw_scaled(p, m, v, g, n, ctl, a);
    quantize(f, r, p, n, nullptr, codes, scales, cols);
  }
  // Literally the contract: adamw_quantize range by range.
  void adamw_quantize_ranges(ScaleRounding r, float* p, float* m, float* v, const float* g, const StepControl* ctl,
                             std::span<const AdamWChoice> choices, const AdamWRanges& ranges, uint8_t* codes,
                             uint8_t* scales) override {
    adamw_quantize_each_range(r, p, m, v, g, ctl, choices, ranges, codes, scales);
  }
  std::unique_ptr<AdamWRanges> adamw_ranges(WeightFormat f, std::vector<AdamWRange> list) override {
    return std::make_unique<AdamWRanges>(f, std::move(list));  // host memory: the list is what the loop reads
  }
  void adamw_amax(float* p, float* m, float* v, const float* g, int64_t n, const StepControl* ctl,
                  const AdamWChoice& a, float* am) override {
    adamw_scaled(p, m, v, g, n, ctl, a);
    amax_into(p, n, am);
  }
  void amax_into(const float* x, int64_t n, float* out) override { *out = std::max(*out, amax(x, n)); }
  void sum_into(const float* x, int64_t n, double* out) override {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += double(x[i]);
    *out = s;
  }
  void fp8b128_scales_for_gemm(const float* scales, int64_t rows, int64_t cols, float* gemm_scales) override {
    mxdp::fp8b128_scales_for_gemm(scales, rows, cols, gemm_scales);
  }
  void fp8b128_transpose_gemm(const uint8_t* codes, const float* gemm_scales, int64_t rows, int64_t cols,
                              uint8_t* codes_t, float* gemm_scales_t) override {
    mxdp::fp8b128_transpose_gemm(codes, gemm_scales, rows, cols, codes_t, gemm_scales_t);
  }
  // Literally the contract: the calls one by one (ops memory is host memory).
  void fp8b128_scales_for_gemm_many(std::span<const Fp8b128Job> jobs, const Fp8b128Job*) override {
    for (const Fp8b128Job& j : jobs) fp8b128_scales_for_gemm(j.scales, j.rows, j.cols, j.out_scales);
  }
  void fp8b128_transpose_gemm_many(std::span<const Fp8b128Job> jobs, const Fp8b128Job*) override {
    for (const Fp8b128Job& j : jobs) fp8b128_transpose_gemm(j.codes, j.scales, j.rows, j.cols, j.codes_t, j.out_scales);
  }
  void* alloc_host(size_t bytes) override { return alloc(bytes); }
  void release_host(void* p) override { release(p); }
  void copy_to_host_async(void* host, const void* src, size_t bytes) override { copy_to_host(host, src, bytes); }
};

}  // namespace

std::unique_ptr<EngineOps> make_cpu_ops() { return std::make_unique<CpuOps>(); }

}  // namespace mxdp
