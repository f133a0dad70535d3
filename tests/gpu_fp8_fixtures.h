// What the GPU models' FP8 compute tests share (gputest_gpt, gputest_llama):
//   Fp8Weights  the weights of a CPU model's FP8 linears as the engine hands
//               them out (fp8b128 codes and GEMM-layout tile scales, W and
//               W^T), made here with the CPU codec from the CPU model's fp32
//               weights, in host memory for the CPU model and in device
//               memory for the GPU one;
//   Fp8Hooks    hooks that add those weights to another set of hooks;
//   Fp8Operands the two 1x128 operands (rows and cols) act_quantize writes,
//               with their device bytes for bitwise comparisons.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/fp8_block.h"
#include "gpu_arrays.h"
#include "models/cuda/fp8_linear.h"
#include "models/model.h"
#include "util/cuda_check.h"

namespace mxdp::gputest {

class Fp8Weights {
 public:
  explicit Fp8Weights(Model& cpu) : w_(cpu.params().size()) {
    for (int p = 0; p < int(cpu.params().size()); ++p) {
      const ParamSpec& s = cpu.params()[size_t(p)];
      if (!s.fp8_linear) continue;
      One& o = w_[size_t(p)];
      o.rows = s.shape[0];
      o.cols = s.shape[1];
      std::vector<float> compact(size_t(fp8b128_scale_count(o.rows, o.cols))), compact_t(compact.size());
      o.codes.resize(size_t(s.numel()));
      o.codes_t.resize(o.codes.size());
      fp8b128_quantize(cpu.weights(p), o.rows, o.cols, o.codes.data(), compact.data());
      fp8b128_transpose(o.codes.data(), compact.data(), o.rows, o.cols, o.codes_t.data(), compact_t.data());
      o.gemm.resize(size_t(fp8b128_gemm_scale_count(o.rows, o.cols)));
      o.gemm_t.resize(size_t(fp8b128_gemm_scale_count(o.cols, o.rows)));
      fp8b128_scales_for_gemm(compact.data(), o.rows, o.cols, o.gemm.data());
      fp8b128_scales_for_gemm(compact_t.data(), o.cols, o.rows, o.gemm_t.data());
      o.dc = std::make_unique<Dev<uint8_t>>(o.codes);
      o.dct = std::make_unique<Dev<uint8_t>>(o.codes_t);
      o.ds = std::make_unique<Dev<float>>(o.gemm);
      o.dst = std::make_unique<Dev<float>>(o.gemm_t);
    }
  }
  Fp8Weight get(int p, bool transposed, bool device) const {
    const One& o = w_.at(size_t(p));
    EXPECT_GT(o.rows, 0) << "FP8 weight of param " << p << ", which is not an FP8 linear";
    if (transposed)
      return {device ? o.dct->p : o.codes_t.data(), device ? o.dst->p : o.gemm_t.data(), o.cols, o.rows};
    return {device ? o.dc->p : o.codes.data(), device ? o.ds->p : o.gemm.data(), o.rows, o.cols};
  }

 private:
  struct One {
    std::vector<uint8_t> codes, codes_t;
    std::vector<float> gemm, gemm_t;
    std::unique_ptr<Dev<uint8_t>> dc, dct;
    std::unique_ptr<Dev<float>> ds, dst;
    int64_t rows = 0, cols = 0;
  };
  std::vector<One> w_;
};

// Hooks `in` plus the FP8 weights (host or device copies).
struct Fp8Hooks final : ModelHooks {
  ModelHooks& in;
  const Fp8Weights& fw;
  bool device;
  Fp8Hooks(ModelHooks& h, const Fp8Weights& w, bool dev) : in(h), fw(w), device(dev) {}
  void before_layer(int l) override { in.before_layer(l); }
  float* grad(int p) override { return in.grad(p); }
  void after_layer_backward(int l) override { in.after_layer_backward(l); }
  Fp8Weight fp8_weight(int p) override { return fw.get(p, false, device); }
  Fp8Weight fp8_weight_transposed(int p) override { return fw.get(p, true, device); }
};

// The rows ([Mp, N], 1x128 along N) and cols ([N, Mp]) operands of an M x N input.
struct Fp8Operands {
  Dev<uint8_t> rc, cc;
  Dev<float> rs, cs;
  Fp8Operands(int Mp, int N)
      : rc(size_t(Mp) * N), cc(size_t(Mp) * N), rs(size_t(fp8_1x128_scale_count(Mp, N))),
        cs(size_t(fp8_1x128_scale_count(N, Mp))) {}
  cuda::Fp8Slot rows() const { return {rc.p, rs.p}; }
  cuda::Fp8Slot cols() const { return {cc.p, cs.p}; }
  // Every byte of both operands the same as o's; `what` names the case in the failures.
  void expect_same(const Fp8Operands& o, const std::string& what) const {
    EXPECT_EQ(rc.bytes(), o.rc.bytes()) << what << ": row codes";
    EXPECT_EQ(rs.bytes(), o.rs.bytes()) << what << ": row scales";
    EXPECT_EQ(cc.bytes(), o.cc.bytes()) << what << ": column codes";
    EXPECT_EQ(cs.bytes(), o.cs.bytes()) << what << ": column scales";
  }
};

}  // namespace mxdp::gputest
