// The GPU GPT (cuda/gpt_cuda.h) and its kernels against the CPU GPT (gpt.h,
// gpt_cpu.h), which computes the same model in fp32.
//
// Inputs are rounded to bf16 first, so both sides see the same values and the
// differences come from the GPU's bf16 outputs and its summation orders only.
// Tolerances, as relative error of the whole tensor (||gpu - cpu|| / ||cpu||):
//   - one bf16 rounding of an output: 2^-9 = 0.2% per element; we allow 1%;
//   - fp32 sums of the same bf16 inputs in another order: ~1e-6; we allow 1e-4;
//   - a whole forward/backward of a small GPT in bf16 (every activation rounded,
//     errors compounding over ~20 roundings): logits 2%, gradients 5%, loss 0.5%.
// A wrong index, a missing term or a race is far beyond these.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "formats/fp8_block.h"
#include "models/cuda/attention.h"
#include "models/cuda/classifier.h"
#include "models/cuda/column_sums.h"
#include "models/cuda/fp8_linear.h"
#include "models/cuda/gemm.h"
#include "models/gpt2/cuda/gpt_cuda.h"
#include "models/gpt2/cuda/gpt_kernels.h"
#include "compare_util.h"
#include "util/cuda_check.h"
#include "formats/codec.h"
#include "models/gpt2/gpt.h"
#include "models/gpt2/gpt_cpu.h"
#include "gpu_fp8_fixtures.h"
#include "gpu_arrays.h"
#include "gpu_test_util.h"

using namespace mxdp;
using mxdp::gputest::Bf16;
using mxdp::gputest::Dev;
using mxdp::gputest::F32;
using mxdp::gputest::Stream;
using mxdp::testing::bfr;
using mxdp::testing::rel_err;
using mxdp::gputest::DevHooks;
using mxdp::gputest::Fp8Hooks;
using mxdp::gputest::Fp8Weights;
using mxdp::gputest::HostHooks;
using mxdp::gputest::make_tokens;
using mxdp::gputest::randn;

namespace {

struct Shape {
  int B, T, C, NH;
};
// {4, 600, ...}: 2400 rows, 19 chunks of column sums (several per warp of the last block).
const Shape kShapes[] = {{3, 37, 64, 4}, {1, 37, 1600, 25}, {2, 64, 128, 2}, {4, 600, 64, 4}};

// ---------------------------------------------------------------- kernels

// The column sums of m [M, C] (the GPU's dx as stored) in norm_backward's
// order (models/cuda/norm_backward.h): each CTA's kNormRows rows in row order,
// then the CTAs' partial sums as column_sums_finish adds them (warp w sums CTAs
// w, w + 8, ... in order, then the 8 warp sums in warp order), into `start`
// (accumulate) or in its place. Written from that description, in float.
std::vector<float> norm_order_sums(const std::vector<float>& m, int M, int C, const std::vector<float>& start,
                                   bool accumulate) {
  const int ctas = (M + cuda::kNormRows - 1) / cuda::kNormRows;
  std::vector<float> out(start), part(static_cast<size_t>(ctas), 0.f);
  for (int n = 0; n < C; ++n) {
    for (int k = 0; k < ctas; ++k) {
      float s = 0.f;
      for (int r = k * cuda::kNormRows; r < std::min(M, (k + 1) * cuda::kNormRows); ++r) s += m[size_t(r) * C + n];
      part[size_t(k)] = s;
    }
    float t = 0.f;
    for (int w = 0; w < 8; ++w) {
      float s = 0.f;
      for (int k = w; k < ctas; k += 8) s += part[size_t(k)];
      t += s;
    }
    out[size_t(n)] = accumulate ? out[size_t(n)] + t : t;
  }
  return out;
}

TEST(GpuGptKernels, LayerNormForwardAndBackwardMatchCpu) {
  REQUIRE_GPU();
  Stream st;
  for (const Shape& sh : kShapes) {
    const int M = sh.B * sh.T, C = sh.C;
    auto x = randn(size_t(M) * C, 1, 2.f), w = randn(C, 2), b = randn(C, 3), d = randn(size_t(M) * C, 4);
    std::vector<float> out(x.size()), mean(M), rstd(M), dx(x.size(), 0.f), dw(C, 0.f), db(C, 0.f);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), M, C);
    cpu::layernorm_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), w.data(), mean.data(), rstd.data(), M, C);
    Bf16 gx(x), gw(w), gb(b), gd(d), gout(x.size()), gdx(x.size());
    F32 gmean(M), grstd(M), gdw(std::vector<float>(C, 0.f)), gdb(std::vector<float>(C, 0.f));
    F32 scratch(size_t(cuda::norm_backward_scratch_floats(M, C)));  // nothing to zero
    cuda::layernorm_forward(gout.p, gmean.p, grstd.p, gx.p, gw.p, gb.p, M, C, st.s);
    // The column sums of the new dx ride along (written, not added: 7s there are overwritten).
    F32 gsum(std::vector<float>(C, 7.f));
    cuda::layernorm_backward(gdx.p, false, gdw.p, gdb.p, {gsum.p, false}, scratch.p, gd.p, gx.p, gw.p, gmean.p, grstd.p,
                             M, C, st.s);
    EXPECT_LT(rel_err(gout.get(), out), 1e-2) << "C=" << C;
    EXPECT_LT(rel_err(gmean.get(), mean), 1e-5) << "C=" << C;
    EXPECT_LT(rel_err(grstd.get(), rstd), 1e-5) << "C=" << C;
    EXPECT_LT(rel_err(gdx.get(), dx), 1e-2) << "C=" << C;
    EXPECT_LT(rel_err(gdw.get(), dw), 1e-4) << "C=" << C;
    EXPECT_LT(rel_err(gdb.get(), db), 1e-4) << "C=" << C;
    // The sums of dx: against the CPU's column sums of the CPU dx, and bit for
    // bit against norm_backward's documented order over the GPU's dx.
    const auto column_sums = [&](const std::vector<float>& m, float start) {
      std::vector<float> cs(C, start);
      cpu::colsum_accumulate(cs.data(), m.data(), M, C);
      return cs;
    };
    EXPECT_LT(rel_err(gsum.get(), column_sums(gdx.get(), 0.f)), 1e-4) << "C=" << C;
    EXPECT_EQ(gsum.get(), norm_order_sums(gdx.get(), M, C, std::vector<float>(C, 7.f), false)) << "C=" << C;
    // Accumulating backward adds onto what is there (the residual stream's
    // gradient), and the sums of the new dx add onto theirs.
    const std::vector<float> first = gsum.get();
    cuda::layernorm_backward(gdx.p, true, gdw.p, gdb.p, {gsum.p, true}, scratch.p, gd.p, gx.p, gw.p, gmean.p, grstd.p,
                             M, C, st.s);
    std::vector<float> dx2 = dx, dw2 = dw, db2 = db;
    cpu::layernorm_backward(dx2.data(), dw2.data(), db2.data(), d.data(), x.data(), w.data(), mean.data(), rstd.data(), M, C);
    EXPECT_LT(rel_err(gdx.get(), dx2), 1e-2) << "C=" << C;
    EXPECT_LT(rel_err(gdw.get(), dw2), 1e-4) << "C=" << C;
    EXPECT_EQ(gsum.get(), norm_order_sums(gdx.get(), M, C, first, true)) << "C=" << C;
  }
}

TEST(GpuGptKernels, GemmsWithEpiloguesMatchCpu) {
  REQUIRE_GPU();
  Stream st;
  cuda::Gemm gemm(st.s);
  for (const Shape& sh : kShapes) {
    const int M = sh.B * sh.T, K = sh.C, N = 4 * sh.C;
    auto x = randn(size_t(M) * K, 5), W = randn(size_t(N) * K, 6, 0.05f), bias = randn(N, 7, 0.1f);
    auto dout = randn(size_t(M) * N, 8);
    std::vector<float> wt, pre(size_t(M) * N), h(pre.size()), th(pre.size());
    cpu::matmul_forward(pre.data(), x.data(), W.data(), bias.data(), M, N, K, wt);
    cpu::gelu_forward(h.data(), th.data(), pre.data(), int64_t(pre.size()));
    Bf16 gx(x), gW(W), gbias(bias), gpre(pre.size()), gh(pre.size()), gplain(pre.size());
    gemm.forward(gh.p, gx.p, gW.p, gbias.p, M, N, K, gpre.p);
    gemm.forward(gplain.p, gx.p, gW.p, gbias.p, M, N, K);
    EXPECT_LT(rel_err(gpre.get(), pre), 1e-2) << "K=" << K;
    EXPECT_LT(rel_err(gplain.get(), pre), 1e-2) << "K=" << K;
    EXPECT_LT(rel_err(gh.get(), h), 1e-2) << "gelu K=" << K;
    // Backward through W, and through the GELU (dGELU epilogue) with the bf16 pre-activation.
    std::vector<float> pre_b = gpre.get(), th_b(pre.size()), h_b(pre.size());
    cpu::gelu_forward(h_b.data(), th_b.data(), pre_b.data(), int64_t(pre.size()));
    auto dy = randn(size_t(M) * K, 9);  // gradient of a layer whose input is h
    Bf16 gdy(dy), gWt(W), gdh(pre.size());
    // A second layer W2 = {K, N} maps h [M,N] -> [M,K]: dh = dy @ W2, then through the GELU.
    auto W2 = randn(size_t(K) * N, 10, 0.05f);
    Bf16 gW2(W2);
    gemm.backward_data(gdh.p, gdy.p, gW2.p, M, K, N, gpre.p);
    std::vector<float> dh(pre.size()), dpre(pre.size()), dW2(W2.size(), 0.f);
    cpu::matmul_backward(dh.data(), dW2.data(), nullptr, dy.data(), h_b.data(), W2.data(), M, K, N);
    cpu::gelu_backward(dpre.data(), pre_b.data(), th_b.data(), dh.data(), int64_t(pre.size()));
    EXPECT_LT(rel_err(gdh.get(), dpre), 2e-2) << "dgelu K=" << K;
    // Weight gradient accumulates into fp32.
    std::vector<float> dW(size_t(N) * K, 0.5f), dinp(size_t(M) * K);
    cpu::matmul_backward(dinp.data(), dW.data(), nullptr, dout.data(), x.data(), W.data(), M, N, K);
    F32 gdW(std::vector<float>(size_t(N) * K, 0.5f));
    Bf16 gdout(dout), gdinp(size_t(M) * K);
    gemm.backward_weight(gdW.p, gdout.p, gx.p, M, N, K);
    gemm.backward_data(gdinp.p, gdout.p, gW.p, M, N, K);
    EXPECT_LT(rel_err(gdW.get(), dW), 1e-4) << "K=" << K;
    EXPECT_LT(rel_err(gdinp.get(), dinp), 1e-2) << "K=" << K;
  }
}

TEST(GpuGptKernels, CudnnAttentionMatchesCpu) {
  REQUIRE_GPU();
  Stream st;
  cuda::Attention att(st.s);
  for (const Shape& sh : kShapes) {
    const int B = sh.B, T = sh.T, C = sh.C, NH = sh.NH;
    auto qkv = randn(size_t(B) * T * 3 * C, 11), dout = randn(size_t(B) * T * C, 12);
    std::vector<float> out(size_t(B) * T * C), a(size_t(B) * NH * T * T), dqkv(qkv.size());
    cpu::attention_forward(out.data(), a.data(), qkv.data(), B, T, C, NH);
    cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), a.data(), B, T, C, NH);
    Bf16 gq(qkv), gout(out.size()), gd(dout), gdq(qkv.size());
    F32 stats(size_t(B) * NH * T);
    att.forward(gout.p, stats.p, gq.p, B, T, NH, C / NH);
    att.backward(gdq.p, gd.p, gq.p, gout.p, stats.p, B, T, NH, C / NH);
    EXPECT_LT(rel_err(gout.get(), out), 1e-2) << "B=" << B << " T=" << T << " C=" << C;
    EXPECT_LT(rel_err(gdq.get(), dqkv), 3e-2) << "B=" << B << " T=" << T << " C=" << C;
    // Deterministic backward: the same bits again.
    auto first = gdq.get();
    att.backward(gdq.p, gd.p, gq.p, gout.p, stats.p, B, T, NH, C / NH);
    auto second = gdq.get();
    EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * 4), 0) << "attention backward not repeatable";
  }
}

TEST(GpuGptKernels, BiasGradientMatchesCpu) {
  REQUIRE_GPU();
  Stream st;
  // 20000 rows: 157 chunks, so each warp of the last block adds several chunks' partial sums.
  for (int M : {1, 37, 300, 1000, 20000})
    for (int N : {64, 200, 4800}) {
      if (M == 20000 && N == 4800) continue;
      auto d = randn(size_t(M) * N, 13);
      std::vector<float> db(N, 0.25f);
      cpu::colsum_accumulate(db.data(), d.data(), M, N);
      Bf16 gd(d);
      F32 gdb(std::vector<float>(N, 0.25f)), scratch(std::vector<float>(size_t(cuda::colsum_scratch_floats(M, N)), 0.f));
      cuda::bias_backward(gdb.p, scratch.p, gd.p, M, N, st.s);
      EXPECT_LT(rel_err(gdb.get(), db), 1e-5) << M << "x" << N;
      // Again with the same scratch: its counters were left at zero.
      cpu::colsum_accumulate(db.data(), d.data(), M, N);
      cuda::bias_backward(gdb.p, scratch.p, gd.p, M, N, st.s);
      EXPECT_LT(rel_err(gdb.get(), db), 1e-5) << M << "x" << N << ", second use of the scratch";
    }
}

TEST(GpuGptKernels, EncoderForwardExactAndBackwardBitwise) {
  REQUIRE_GPU();
  Stream st;
  // The CPU loops of Gpt::run_forward / Gpt::backward, written out (they are
  // inline there): the same summation order, so the results are bitwise equal.
  const int B = 3, T = 37, C = 64, V = 50;
  std::vector<int32_t> tok(size_t(B) * T);
  std::mt19937 g(14);
  for (auto& t : tok) t = int32_t(g() % 7);  // many repeats: the deterministic path matters
  auto wte = randn(size_t(V) * C, 15), wpe = randn(size_t(T) * C, 16), dx = randn(size_t(B) * T * C, 17);
  std::vector<float> x(size_t(B) * T * C), dwte(size_t(V) * C, 0.f), dwpe(size_t(T) * C, 0.f);
  for (int m = 0; m < B * T; ++m)
    for (int c = 0; c < C; ++c) x[size_t(m) * C + c] = bfr(wte[size_t(tok[m]) * C + c] + wpe[size_t(m % T) * C + c]);
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) {
      float s = 0.f;
      for (int b = 0; b < B; ++b) s += dx[(size_t(b) * T + t) * C + c];
      dwpe[size_t(t) * C + c] += s;
    }
  for (int v = 0; v < V; ++v)
    for (int c = 0; c < C; ++c) {
      float s = 0.f;
      for (int m = 0; m < B * T; ++m)
        if (tok[m] == v) s += dx[size_t(m) * C + c];
      dwte[size_t(v) * C + c] += s;
    }
  // Segments as the model builds them: positions sorted by (token, position).
  std::vector<int32_t> order, seg_start, seg_token;
  for (int v = 0; v < V; ++v) {
    bool any = false;
    for (int m = 0; m < B * T; ++m)
      if (tok[m] == v) {
        if (!any) {
          seg_start.push_back(int32_t(order.size()));
          seg_token.push_back(v);
          any = true;
        }
        order.push_back(m);
      }
  }
  seg_start.push_back(int32_t(order.size()));
  Dev<int32_t> gtok(tok.size()), gorder(order.size()), gstart(seg_start.size()), gsegtok(seg_token.size());
  MXDP_CUDA_CHECK(cudaMemcpy(gtok.p, tok.data(), tok.size() * 4, cudaMemcpyHostToDevice));
  MXDP_CUDA_CHECK(cudaMemcpy(gorder.p, order.data(), order.size() * 4, cudaMemcpyHostToDevice));
  MXDP_CUDA_CHECK(cudaMemcpy(gstart.p, seg_start.data(), seg_start.size() * 4, cudaMemcpyHostToDevice));
  MXDP_CUDA_CHECK(cudaMemcpy(gsegtok.p, seg_token.data(), seg_token.size() * 4, cudaMemcpyHostToDevice));
  Bf16 gwte(wte), gwpe(wpe), gx(x.size()), gdx(dx);
  F32 gdwte(std::vector<float>(dwte.size(), 0.f)), gdwpe(std::vector<float>(dwpe.size(), 0.f));
  cuda::encoder_forward(gx.p, gtok.p, gwte.p, gwpe.p, B, T, C, st.s);
  cuda::encoder_backward(gdwte.p, gdwpe.p, gdx.p, gorder.p, gstart.p, gsegtok.p, int(seg_token.size()), B, T, C, st.s);
  auto ox = gx.get(), owte = gdwte.get(), owpe = gdwpe.get();
  EXPECT_EQ(std::memcmp(ox.data(), x.data(), x.size() * 4), 0) << "encoder forward";
  EXPECT_EQ(std::memcmp(owte.data(), dwte.data(), dwte.size() * 4), 0) << "dwte";
  EXPECT_EQ(std::memcmp(owpe.data(), dwpe.data(), dwpe.size() * 4), 0) << "dwpe";
}

TEST(GpuGptKernels, ClassifierLossAndGradientMatchDoubleReference) {
  REQUIRE_GPU();
  Stream st;
  // Both kernel variants (16-byte accesses; element accesses for an odd padded
  // width), rows of one to many accesses per thread.
  // 130000: a row longer than the L2 share a block can count on.
  for (auto [V, Vp] : {std::pair{256, 280}, {1000, 1024}, {1001, 1025}, {20000, 20024}, {50257, 50304},
                       {70000, 70024}, {130000, 130000}}) {
    const int M = 37;
    auto z = randn(size_t(M) * Vp, 18, 3.f);
    std::vector<int32_t> tgt(M);
    for (int m = 0; m < M; ++m) tgt[m] = (m * 7919) % V;
    std::vector<float> loss(M), dz(z.size());
    for (int m = 0; m < M; ++m) {
      double mx = -1e30, s = 0;
      for (int v = 0; v < V; ++v) mx = std::max(mx, double(z[size_t(m) * Vp + v]));
      for (int v = 0; v < V; ++v) s += std::exp(z[size_t(m) * Vp + v] - mx);
      const double lse = mx + std::log(s);
      loss[m] = float(lse - z[size_t(m) * Vp + tgt[m]]);
      for (int v = 0; v < Vp; ++v)
        dz[size_t(m) * Vp + v] = v < V ? float((std::exp(z[size_t(m) * Vp + v] - lse) - (v == tgt[m])) / M) : 0.f;
    }
    Bf16 gz(z);
    F32 gloss(M);
    Dev<int32_t> gt(M);
    MXDP_CUDA_CHECK(cudaMemcpy(gt.p, tgt.data(), M * 4, cudaMemcpyHostToDevice));
    cuda::classifier(gz.p, gloss.p, gt.p, M, V, Vp, 1.f / M, true, st.s);
    EXPECT_LT(rel_err(gloss.get(), loss), 1e-5) << "V=" << V;
    auto g = gz.get();
    EXPECT_LT(rel_err(g, dz), 1e-2) << "V=" << V;
    for (int m = 0; m < M; ++m)
      for (int v = V; v < Vp; ++v) ASSERT_EQ(g[size_t(m) * Vp + v], 0.f) << "padding gradient";
  }
}

// act_quantize (FP8 compute's activation operands): its bf16 values against
// the host's bias / GELU / GELU-gradient of the same inputs, and its codes and
// scales bit for bit against the CPU quantizers (formats/fp8_block.h) of the
// bf16 values it wrote, padded with zero rows to a multiple of 128 (M = 300);
// N = 256 (whole tiles) and 208 (a last tile column of 80: partial 1x128 blocks
// along N, as at gpt2-1558m's 1600).
void check_act_quantize(int N) {
  SCOPED_TRACE("N " + std::to_string(N));
  Stream st;
  const int M = 300, Mp = 384;
  std::vector<float> x = randn(size_t(M) * N, 11, 2.f);  // bf16 values
  const std::vector<float> aux = randn(size_t(M) * N, 12), bias = randn(N, 13);
  // Blocks of tiny values (a row and a column scaled by 1e-30: scales near the
  // 2^-126 floor of the power-of-two rule), an all-zero row (scale 1) and signed zeros.
  for (int n = 0; n < N; ++n) {
    x[size_t(5) * N + n] = bfr(x[size_t(5) * N + n] * 1e-30f);
    x[size_t(7) * N + n] = 0.f;
    x[size_t(9) * N + n] = n % 3 == 0 ? -0.f : x[size_t(9) * N + n];
  }
  for (int m = 0; m < M; ++m) x[size_t(m) * N + 3] = bfr(x[size_t(m) * N + 3] * 1e-30f);
  for (int made = 1; made <= 3; ++made)  // rows only, cols only, both: each its own kernel
  for (cuda::ActOp op : {cuda::ActOp::Identity, cuda::ActOp::Gelu, cuda::ActOp::GeluGrad})
    for (bool with_bias : {false, true}) {
      const bool rows = made & 1, cols = made & 2;
      Bf16 dx(x), daux(aux), dbias(bias), out(size_t(M) * N), biased(size_t(M) * N);
      Dev<uint8_t> rc(size_t(Mp) * N), cc(size_t(Mp) * N);
      F32 rs(size_t(fp8_1x128_scale_count(Mp, N))), cs(size_t(fp8_1x128_scale_count(N, Mp)));
      cuda::ActQuant q{.x = dx.p, .bias = with_bias ? dbias.p : nullptr, .biased = with_bias ? biased.p : nullptr,
                       .op = op, .aux = daux.p, .out = op == cuda::ActOp::Identity ? nullptr : out.p,
                       .rows = {rows ? rc.p : nullptr, rs.p}, .cols = {cols ? cc.p : nullptr, cs.p}};
      cuda::act_quantize(q, M, N, st.s);
      MXDP_CUDA_CHECK(cudaStreamSynchronize(st.s));
      const std::string what = std::string(op == cuda::ActOp::Identity ? "identity" : op == cuda::ActOp::Gelu ? "gelu" : "dgelu") +
                               (with_bias ? " + bias" : "") + (rows && cols ? ", both" : rows ? ", rows" : ", cols");
      // The values: host formulas on the same bf16 inputs; the kernel computes
      // 0.5 (1 + tanh u) as a logistic function with fast exp and reciprocal:
      // 1 bf16 ulp allowed, or 1e-6 absolute (where 1 + tanh cancels in the host's fp32).
      std::vector<float> want(size_t(M) * N), biased_want(want.size());
      for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
          const size_t i = size_t(m) * N + n;
          float v = x[i];
          if (with_bias) v = bfr(v + bias[n]);
          biased_want[i] = v;
          if (op == cuda::ActOp::Gelu) {
            const float t = std::tanh(0.7978845608028654f * (v + 0.044715f * v * v * v));
            v = bfr(0.5f * v * (1.f + t));
          } else if (op == cuda::ActOp::GeluGrad) {
            const float a = aux[i], t = std::tanh(0.7978845608028654f * (a + 0.044715f * a * a * a));
            v = bfr(v * (0.5f * (1.f + t) + 0.5f * a * (1.f - t * t) * 0.7978845608028654f * (1.f + 3.f * 0.044715f * a * a)));
          }
          want[i] = v;
        }
      if (with_bias) EXPECT_EQ(biased.get(), biased_want) << what;
      const std::vector<float> got = op == cuda::ActOp::Identity ? (with_bias ? biased.get() : x) : out.get();
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_LE(std::abs(got[i] - want[i]), std::abs(want[i]) * 0x1p-7f + 1e-6f) << what << " at " << i;
      // The operands: the CPU quantizers of the kernel's own bf16 values, zero rows to Mp.
      std::vector<float> padded(size_t(Mp) * N, 0.f);
      std::copy(got.begin(), got.end(), padded.begin());
      std::vector<uint8_t> rc_want(size_t(Mp) * N), cc_want(rc_want.size()), rc_got(rc_want.size()), cc_got(rc_want.size());
      std::vector<float> rs_want(size_t(fp8_1x128_scale_count(Mp, N))), cs_want(size_t(fp8_1x128_scale_count(N, Mp)));
      fp8_quantize_1x128(padded.data(), Mp, N, Fp8Kind::E4M3, rc_want.data(), rs_want.data());
      fp8_quantize_1x128_transposed(padded.data(), Mp, N, Fp8Kind::E4M3, cc_want.data(), cs_want.data());
      MXDP_CUDA_CHECK(cudaMemcpy(rc_got.data(), rc.p, rc_got.size(), cudaMemcpyDeviceToHost));
      MXDP_CUDA_CHECK(cudaMemcpy(cc_got.data(), cc.p, cc_got.size(), cudaMemcpyDeviceToHost));
      std::vector<float> rs_got = rs.get(), cs_got = cs.get();
      rs_got.resize(rs_want.size());
      cs_got.resize(cs_want.size());
      if (rows) {
        EXPECT_EQ(rc_got, rc_want) << what << ": row codes";
        EXPECT_EQ(std::memcmp(rs_got.data(), rs_want.data(), rs_want.size() * 4), 0) << what << ": row scales";
      }
      if (cols) {
        EXPECT_EQ(cc_got, cc_want) << what << ": column (transposed) codes";
        EXPECT_EQ(std::memcmp(cs_got.data(), cs_want.data(), cs_want.size() * 4), 0) << what << ": column scales";
      }
    }
}

TEST(GpuGptKernels, Fp8ActQuantizeIsTheCpuQuantizerOfItsValues) {
  REQUIRE_GPU();
  check_act_quantize(256);
  check_act_quantize(208);
}

// NaN and infinity through act_quantize's bf16 rounding (bf16x8_rn: the
// hardware conversion, the codec for 8 values whose sum is NaN): the biased
// value bit for bit codec::bf16_from_f32(x + bias) where that is a number
// (overflow to infinity included), NaN where it is NaN (x or bias NaN,
// opposite infinities: the payload is the GPU adder's, not the host's); the
// operand's codes and scales those of the CPU quantizer of those bf16 values.
TEST(GpuGptKernels, Fp8ActQuantizeRoundsNaNAndInfinityAsTheCodec) {
  REQUIRE_GPU();
  Stream st;
  const int M = 128, N = 128;
  auto f = [](uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); };
  std::vector<float> x = randn(size_t(M) * N, 31, 3.f), bias = randn(N, 32);
  const uint16_t specials[] = {0x7FC3, 0xFFA5, 0x7F81, 0x7F80, 0xFF80, 0x7F7F, 0xFF7F};
  for (int m = 0; m < M; m += 3)  // one special in some chunks, a few in others, none in the rest
    for (int k = 0; k <= m % 4; ++k) x[size_t(m) * N + (m * 7 + 19 * k) % N] = f(specials[(m + k) % 7]);
  bias[5] = f(0x7F80);   // +inf: meets -inf in x (NaN)
  bias[6] = f(0x7F7F);   // the largest bf16: overflows to +inf with large x
  bias[7] = f(0x7FC1);   // a NaN bias
  Bf16 dx(x), dbias(bias), biased(size_t(M) * N);
  Dev<uint8_t> rc(size_t(M) * N);
  F32 rs(size_t(fp8_1x128_scale_count(M, N)));
  cuda::act_quantize({.x = dx.p, .bias = dbias.p, .biased = biased.p, .rows = {rc.p, rs.p}}, M, N, st.s);
  MXDP_CUDA_CHECK(cudaStreamSynchronize(st.s));
  const std::vector<float> got = biased.get();
  int nans = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      const size_t i = size_t(m) * N + n;
      const uint16_t want = codec::bf16_from_f32(x[i] + bias[n]);
      if (codec::f32_isnan(f(want))) {
        ++nans;
        ASSERT_TRUE(std::isnan(got[i])) << "row " << m << " column " << n;
      } else {
        ASSERT_EQ(uint32_t(want) << 16, std::bit_cast<uint32_t>(got[i])) << "row " << m << " column " << n;
      }
    }
  EXPECT_GT(nans, M);  // the NaN bias column alone gives M
  std::vector<uint8_t> want_c(size_t(M) * N), got_c(want_c.size());
  std::vector<float> want_s(size_t(fp8_1x128_scale_count(M, N)));
  fp8_quantize_1x128(got.data(), M, N, Fp8Kind::E4M3, want_c.data(), want_s.data());
  MXDP_CUDA_CHECK(cudaMemcpy(got_c.data(), rc.p, got_c.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(got_c, want_c);
  const std::vector<float> got_s = rs.get();
  EXPECT_EQ(std::memcmp(got_s.data(), want_s.data(), want_s.size() * 4), 0);
}

// act_quantize as the GPT's FP8 path calls it (gpt_cuda.cu's forward_block_fp8 /
// backward_block_fp8): the bias and the GELU gradient written in place over x,
// operands without the values they quantize written anywhere, and M not a
// multiple of 128 (24 x 10 tiles, the last row of tiles partial). Each call
// against its twin with separate output buffers (whose values the test above
// checks): the values written in place bit for bit, and the codes and scales
// bit for bit against the CPU quantizers of the twin's values.
TEST(GpuGptKernels, Fp8ActQuantizeInPlaceAsTheGptCallsIt) {
  REQUIRE_GPU();
  Stream st;
  const int M = 3000, N = 1280, Mp = 3072;
  const std::vector<float> x0 = randn(size_t(M) * N, 21, 3.f), aux0 = randn(size_t(M) * N, 22), bias0 = randn(N, 23);
  struct Call {
    const char* name;
    cuda::ActOp op;
    bool bias, rows, cols, out;  // out: the op's values written over x
  };
  // The GPT's calls without their column sums (those: the ColumnSums test
  // below) and the LayerNorm op (Fp8LayerNormOperandsWithoutTheLayerNormOutput);
  // the last two are variants the GPT made before (out in place: the GELU
  // gradient's bf16 output, now never written).
  const Call calls[] = {
      {"rows + cols (atty; the output gradients)", cuda::ActOp::Identity, false, true, true, false},
      {"gelu + rows + cols (fc, after the GEMM's bias epilogue)", cuda::ActOp::Gelu, false, true, true, false},
      {"bias + gelu + rows + cols, biased in place (fc without a bias epilogue)", cuda::ActOp::Gelu, true, true, true,
       false},
      {"bias in place (fprop without the bias epilogue)", cuda::ActOp::Identity, true, false, false, false},
      {"dgelu + rows + cols (fc's dY)", cuda::ActOp::GeluGrad, false, true, true, false},
      {"dgelu + rows + cols, out in place", cuda::ActOp::GeluGrad, false, true, true, true},
      {"bias + gelu + rows, biased in place", cuda::ActOp::Gelu, true, true, false, false},
  };
  const auto bits = [](const Bf16& b) {
    std::vector<uint16_t> h(b.n);
    MXDP_CUDA_CHECK(cudaMemcpy(h.data(), b.p, b.n * 2, cudaMemcpyDeviceToHost));
    return h;
  };
  const auto codes = [](const Dev<uint8_t>& d) {
    std::vector<uint8_t> h(d.n);
    MXDP_CUDA_CHECK(cudaMemcpy(h.data(), d.p, d.n, cudaMemcpyDeviceToHost));
    return h;
  };
  for (const Call& c : calls) {
    const bool op = c.op != cuda::ActOp::Identity;
    // The twin: x untouched, the biased and the op's values in buffers of their own.
    Bf16 tx(x0), taux(aux0), tbias(bias0), tbiased(size_t(M) * N), tout(size_t(M) * N);
    if (op || c.bias)
      cuda::act_quantize({.x = tx.p, .bias = c.bias ? tbias.p : nullptr, .biased = c.bias ? tbiased.p : nullptr,
                          .op = c.op, .aux = taux.p, .out = op ? tout.p : nullptr, .rows = {}, .cols = {}},
                         M, N, st.s);
    // The call in place.
    Bf16 x(x0), aux(aux0), bias(bias0);
    Dev<uint8_t> rc(size_t(Mp) * N), cc(size_t(Mp) * N);
    F32 rs(size_t(Mp) * N / 128), cs(size_t(Mp) * N / 128);
    cuda::act_quantize({.x = x.p, .bias = c.bias ? bias.p : nullptr, .biased = c.bias ? x.p : nullptr, .op = c.op,
                        .aux = aux.p, .out = c.out ? x.p : nullptr, .rows = {c.rows ? rc.p : nullptr, rs.p},
                        .cols = {c.cols ? cc.p : nullptr, cs.p}},
                       M, N, st.s);
    MXDP_CUDA_CHECK(cudaStreamSynchronize(st.s));
    const std::vector<uint16_t> got_x = bits(x);
    if (c.out) EXPECT_EQ(got_x, bits(tout)) << c.name << ": the op's values in place";
    else if (c.bias) EXPECT_EQ(got_x, bits(tbiased)) << c.name << ": the biased values in place";
    else EXPECT_EQ(got_x, bits(tx)) << c.name << ": x unchanged";
    // The values quantized, zero rows to Mp.
    std::vector<uint16_t> padded(size_t(Mp) * N, 0);
    const std::vector<uint16_t> vals = op ? bits(tout) : c.bias ? bits(tbiased) : bits(tx);
    std::copy(vals.begin(), vals.end(), padded.begin());
    if (c.rows) {
      std::vector<uint8_t> want(size_t(Mp) * N);
      std::vector<float> want_s(size_t(fp8_1x128_scale_count(Mp, N)));
      fp8_quantize_1x128(padded.data(), Mp, N, Fp8Kind::E4M3, want.data(), want_s.data());
      const std::vector<float> got_s = rs.get();
      EXPECT_EQ(codes(rc), want) << c.name << ": row codes";
      ASSERT_EQ(got_s.size(), want_s.size());
      EXPECT_EQ(std::memcmp(got_s.data(), want_s.data(), want_s.size() * 4), 0) << c.name << ": row scales";
    }
    if (c.cols) {
      std::vector<uint8_t> want(size_t(Mp) * N);
      std::vector<float> want_s(size_t(fp8_1x128_scale_count(N, Mp)));
      fp8_quantize_1x128_transposed(padded.data(), Mp, N, Fp8Kind::E4M3, want.data(), want_s.data());
      const std::vector<float> got_s = cs.get();
      EXPECT_EQ(codes(cc), want) << c.name << ": column codes";
      ASSERT_EQ(got_s.size(), want_s.size());
      EXPECT_EQ(std::memcmp(got_s.data(), want_s.data(), want_s.size() * 4), 0) << c.name << ": column scales";
    }
  }
}

// act_quantize's column sums, as the GPT's FP8 backward asks for them (fc's
// dY through the GELU gradient, qkv's dY as it is: gpt_cuda.cu's
// backward_block_fp8, where they replace two bias_backward launches): the sums
// bit for bit bias_backward's over the op's bf16 values, added into non-zero
// values, twice over one scratch (as the GPT shares it), and the codes and
// scales bit for bit those of the same call without the sums. M = 300: a
// partial last row of tiles; N = 208: a partial last tile column; 16384 x 3072
// (gpt2-124m's fc) and x 2304 (its qkv): 128 chunks, where a summation order
// other than bias_backward's shows in the bits (the test checks that a plain
// sequential sum over the rows does).
TEST(GpuGptKernels, Fp8ActQuantizeColumnSumsAreBiasBackward) {
  REQUIRE_GPU();
  Stream st;
  struct Case {
    int M, N;
    cuda::ActOp op;
  };
  const Case cases[] = {{300, 208, cuda::ActOp::Identity},    {300, 208, cuda::ActOp::GeluGrad},
                        {300, 2304, cuda::ActOp::Identity},   {1000, 3072, cuda::ActOp::GeluGrad},
                        {16384, 3072, cuda::ActOp::GeluGrad}, {16384, 2304, cuda::ActOp::Identity}};
  for (const Case& c : cases) {
    const int M = c.M, N = c.N, Mp = int(cuda::fp8_rows_padded(M));
    const bool dgelu = c.op == cuda::ActOp::GeluGrad;
    SCOPED_TRACE(std::to_string(M) + " x " + std::to_string(N) + (dgelu ? ", dgelu" : ", identity"));
    const std::vector<float> dst0 = randn(size_t(N), 43, 4.f);
    Bf16 x(randn(size_t(M) * N, 41, 2.f)), aux(randn(size_t(M) * N, 42)), out(size_t(M) * N);
    const size_t codes = size_t(Mp) * N;
    Dev<uint8_t> rc(codes), cc(codes), rc_sum(codes), cc_sum(codes);
    F32 rs(size_t(fp8_1x128_scale_count(Mp, N))), cs(size_t(fp8_1x128_scale_count(N, Mp)));
    F32 rs_sum(rs.n), cs_sum(cs.n), want(dst0), got(dst0);
    F32 scratch(std::vector<float>(size_t(cuda::colsum_scratch_floats(M, N)), 0.f));  // zeroed once
    // The reference: the call without the sums (the op's values to out), and
    // bias_backward over the values it quantized.
    cuda::act_quantize({.x = x.p, .op = c.op, .aux = aux.p, .out = dgelu ? out.p : nullptr, .rows = {rc.p, rs.p},
                        .cols = {cc.p, cs.p}},
                       M, N, st.s);
    const uint16_t* values = dgelu ? out.p : x.p;
    const cuda::ActQuant with_sums{.x = x.p, .op = c.op, .aux = aux.p, .rows = {rc_sum.p, rs_sum.p},
                                   .cols = {cc_sum.p, cs_sum.p}, .sums = {got.p, scratch.p}};
    for (int round = 1; round <= 2; ++round) {
      cuda::bias_backward(want.p, scratch.p, values, M, N, st.s);
      cuda::act_quantize(with_sums, M, N, st.s);
      EXPECT_TRUE(same_bits(got, want)) << "round " << round << ": the column sums";
    }
    EXPECT_TRUE(same_bits(rc_sum, rc)) << "row codes";
    EXPECT_TRUE(same_bits(rs_sum, rs)) << "row scales";
    EXPECT_TRUE(same_bits(cc_sum, cc)) << "column codes";
    EXPECT_TRUE(same_bits(cs_sum, cs)) << "column scales";
    if (M < 16384) continue;
    // The check can fail: (dst0 + s) + s, s the sequential fp32 sum over the
    // rows, differs from bias_backward's bits in some column.
    const std::vector<float> v = dgelu ? out.get() : x.get(), w = want.get();
    int differ = 0;
    for (int n = 0; n < N; ++n) {
      float sum = 0.f;
      for (int m = 0; m < M; ++m) sum += v[size_t(m) * N + n];
      const float seq = (dst0[size_t(n)] + sum) + sum;
      differ += std::memcmp(&seq, &w[size_t(n)], 4) != 0;
    }
    EXPECT_GT(differ, 0) << "a sequential sum gives bias_backward's bits in every column: the test cannot fail";
  }
}

// FP8 compute's forward makes the wgrad operand X^T of each linear's input in
// the pass that makes fprop's rows (gpt_cuda.cu's forward_block_fp8), where
// backward made it before from what the forward kept in bf16: cols of the
// LayerNorm and attention outputs, and GELU(pre)^T recomputed from the
// pre-activation the forward had biased in place. The one pass must give
// exactly those operands, and the rows and biased values of the forward's
// rows-only pass, for the step's results to stay bit for bit what they were.
// Values across GELU's range (its saturating tails, signed zeros) and M not a
// multiple of 128.
TEST(GpuGptKernels, Fp8ForwardMakesTheTransposesBackwardMadeBefore) {
  REQUIRE_GPU();
  Stream st;
  const int M = 300, N = 512, Mp = 384;
  std::vector<float> x0 = randn(size_t(M) * N, 31, 4.f);
  for (int n = 0; n < N; ++n) {
    x0[size_t(3) * N + n] = bfr(float(n - N / 2) * 0.25f);  // -64 .. 63.75
    x0[size_t(4) * N + n] = n % 2 ? -0.f : 0.f;
  }
  const std::vector<float> bias0 = randn(N, 32);
  struct Operands {
    Dev<uint8_t> rc, cc;
    F32 rs, cs;
    explicit Operands(size_t n) : rc(n), cc(n), rs(n / 128), cs(n / 128) {}
    cuda::Fp8Slot rows() const { return {rc.p, rs.p}; }
    cuda::Fp8Slot cols() const { return {cc.p, cs.p}; }
  };
  for (const bool fc : {false, true}) {  // identity (ln1, atty, ln2), or bias + GELU (fc's h)
    const char* what = fc ? "bias + gelu (h)" : "identity (ln1, atty, ln2)";
    const cuda::ActOp op = fc ? cuda::ActOp::Gelu : cuda::ActOp::Identity;
    Bf16 x_before(x0), x_now(x0), bias(bias0);
    const Operands before(size_t(Mp) * N), now(size_t(Mp) * N);
    // Before: the forward's rows (fc: the bias written back over pre), then
    // backward's cols from what the forward left.
    cuda::act_quantize({.x = x_before.p, .bias = fc ? bias.p : nullptr, .biased = fc ? x_before.p : nullptr, .op = op,
                        .rows = before.rows()},
                       M, N, st.s);
    cuda::act_quantize({.x = x_before.p, .op = op, .cols = before.cols()}, M, N, st.s);
    // Now: the forward's one pass.
    cuda::act_quantize({.x = x_now.p, .bias = fc ? bias.p : nullptr, .biased = fc ? x_now.p : nullptr, .op = op,
                        .rows = now.rows(), .cols = now.cols()},
                       M, N, st.s);
    EXPECT_TRUE(same_bits(x_now, x_before)) << what << ": x (fc: biased in place)";
    EXPECT_TRUE(same_bits(now.rc, before.rc)) << what << ": row codes";
    EXPECT_TRUE(same_bits(now.rs, before.rs)) << what << ": row scales";
    EXPECT_TRUE(same_bits(now.cc, before.cc)) << what << ": column codes";
    EXPECT_TRUE(same_bits(now.cs, before.cs)) << what << ": column scales";
  }
}

// FP8 compute makes the operands of the LayerNorm outputs ln1 and ln2 without
// writing them (gpt_cuda.cu's forward_block_fp8): the LayerNorm kernels get a
// null output and write only mean and rstd (and the residual sum), and
// act_quantize's LayerNorm op computes each output element from the
// LayerNorm's input and those. Before, the kernels wrote the bf16 output and an
// identity pass quantized it. Both ways must give the same codes and scales,
// statistics and residual sum, bit for bit, for the step's results to stay
// what they were. M = 300 (a partial last row of tiles), C = 256 and 208 (a
// partial last tile column); rows with special values: constant (zero
// variance), tiny (the squared deviations underflow), huge (they overflow:
// rstd 0), one outlier, signed zeros, an infinity (mean inf, rstd NaN: a row
// of NaN, whose bf16 bits the op's rounding must give as the kernel's does). An fp32 ulp of difference moves few
// bf16 values and fewer codes, so operands alone would let a wrong order of the
// op's float operations pass: the op also writes its bf16 values (`out`),
// compared with the kernel's output, and a third shape, 32768 x 256, holds
// enough elements that a wrong order moves some (on the host, another
// contraction or association of the element moved about 300 of the bf16 values
// of 65536 random rows of 256).
TEST(GpuGptKernels, Fp8LayerNormOperandsWithoutTheLayerNormOutput) {
  REQUIRE_GPU();
  Stream st;
  using Operands = gputest::Fp8Operands;
  const std::pair<int, int> shapes[] = {{300, 256}, {300, 208}, {32768, 256}};
  for (const auto& shape : shapes) {
    const int M = shape.first, C = shape.second, Mp = int(cuda::fp8_rows_padded(M));
    std::vector<float> a0 = randn(size_t(M) * C, 41, 2.f), b0 = randn(size_t(M) * C, 42);
    const std::vector<float> w0 = randn(C, 43), bias0 = randn(C, 44);
    const auto row = [&](int m) { return a0.begin() + ptrdiff_t(m) * C; };
    std::fill(row(0), row(1), 1.5f);
    for (int n = 0; n < C; ++n) {
      row(1)[n] = bfr(row(1)[n] * 1e-30f);
      row(2)[n] = bfr(row(2)[n] * 1e30f);
      row(4)[n] = n % 2 ? -0.f : 0.f;
    }
    row(3)[5] = 32768.f;
    row(5)[7] = INFINITY;
    for (int m = 0; m < 6; ++m)  // the residual variant's sum keeps these rows as they are
      std::fill(b0.begin() + ptrdiff_t(m) * C, b0.begin() + ptrdiff_t(m + 1) * C, -0.f);
    for (const bool residual : {false, true}) {
      SCOPED_TRACE(std::to_string(M) + " x " + std::to_string(C) + (residual ? ", residual + LayerNorm" : ""));
      const Bf16 a(a0), b(b0), w(w0), bias(bias0);
      // Before: the kernel's bf16 output, then the identity pass.
      Bf16 out_before(size_t(M) * C), res_before(size_t(M) * C);
      F32 mean_before(M), rstd_before(M);
      const Operands before(Mp, C);
      if (residual)
        cuda::residual_layernorm_forward(res_before.p, out_before.p, mean_before.p, rstd_before.p, a.p, b.p, w.p,
                                         bias.p, M, C, st.s);
      else
        cuda::layernorm_forward(out_before.p, mean_before.p, rstd_before.p, a.p, w.p, bias.p, M, C, st.s);
      cuda::act_quantize({.x = out_before.p, .rows = before.rows(), .cols = before.cols()}, M, C, st.s);
      // Now: no output, then the LayerNorm op on the kernel's input, as the GPT
      // calls it, and once more writing its values.
      Bf16 res_now(size_t(M) * C), values(size_t(M) * C);
      F32 mean_now(M), rstd_now(M);
      const Operands now(Mp, C), again(Mp, C);
      if (residual)
        cuda::residual_layernorm_forward(res_now.p, nullptr, mean_now.p, rstd_now.p, a.p, b.p, w.p, bias.p, M, C, st.s);
      else
        cuda::layernorm_forward(nullptr, mean_now.p, rstd_now.p, a.p, w.p, bias.p, M, C, st.s);
      const cuda::NormArgs ln{mean_now.p, rstd_now.p, w.p, bias.p};
      const uint16_t* input = residual ? res_now.p : a.p;
      cuda::act_quantize({.x = input, .op = cuda::ActOp::LayerNorm, .norm = ln, .rows = now.rows(), .cols = now.cols()},
                         M, C, st.s);
      cuda::act_quantize({.x = input, .op = cuda::ActOp::LayerNorm, .norm = ln, .out = values.p, .rows = again.rows(),
                          .cols = again.cols()},
                         M, C, st.s);
      EXPECT_TRUE(same_bits(mean_now, mean_before)) << "mean";
      EXPECT_TRUE(same_bits(rstd_now, rstd_before)) << "rstd";
      if (residual) EXPECT_TRUE(same_bits(res_now, res_before)) << "the residual sum";
      EXPECT_TRUE(same_bits(values, out_before)) << "the op's bf16 values against the kernel's output";
      now.expect_same(before, "as the GPT calls it");
      again.expect_same(before, "writing its values");
    }
  }
}

// ---------------------------------------------------------------- the model

struct Pair {
  GptConfig cfg;
  Stream st;
  Gpt cpu;
  std::unique_ptr<GptModel> gpu;
  explicit Pair(const GptConfig& c) : cfg(c), cpu(c), gpu(cuda::make_gpt(c, st.s)) {
    // The same weights on both: the init, rounded to bf16 (what the GPU holds).
    cpu.init_weights(7);
    for (int p = 0; p < int(cpu.params().size()); ++p) {
      float* w = cpu.weights(p);
      for (int64_t i = 0; i < cpu.params()[p].numel(); ++i) w[i] = bfr(w[i]);
      gpu->set_weights(p, w);
    }
  }
};

TEST(GpuGpt, LossLogitsAndEveryGradientMatchCpuGpt) {
  REQUIRE_GPU();
  const GptConfig small{.vocab = 250, .padded_vocab = 256, .max_seq = 64, .n_layer = 2, .n_head = 4, .d_model = 64};
  const GptConfig wide{.vocab = 256, .padded_vocab = 256, .max_seq = 40, .n_layer = 1, .n_head = 25, .d_model = 1600};
  for (const GptConfig& cfg : {small, wide})
    for (int B : {1, 3}) {
      const int T = 37;
      Pair m(cfg);
      std::vector<int32_t> in, tgt;
      make_tokens(cfg.vocab, B, T, 100 + B, in, tgt);
      const Batch batch{in.data(), tgt.data(), B, T};
      // Logits (inference path).
      NullHooks nh;
      m.cpu.forward_logits(in.data(), B, T, nh);
      m.gpu->forward_logits(in.data(), B, T, nh);
      for (int b = 0; b < B; ++b)
        EXPECT_LT(rel_err(m.gpu->logits_last(b), m.cpu.logits_last(b)), 2e-2) << "logits C=" << cfg.d_model << " b=" << b;
      HostHooks hc(m.cpu.params());
      DevHooks hg(m.cpu.params());
      const float lc = m.cpu.forward(batch, hc), lg = m.gpu->forward(batch, hg);
      EXPECT_NEAR(lg, lc, 5e-3 * lc) << "loss C=" << cfg.d_model << " B=" << B;
      m.cpu.backward(hc);
      m.gpu->backward(hg);
      for (int p = 0; p < int(m.cpu.params().size()); ++p) {
        const auto& name = m.cpu.params()[p].name;
        double e = rel_err(hg.get(p), hc.g[p]);
        EXPECT_LT(e, 5e-2) << name << " C=" << cfg.d_model << " B=" << B;
      }
      // Hook order: forward layers in increasing order, backward in decreasing.
      std::vector<int> up, down;
      for (int l = 0; l < m.gpu->num_layers(); ++l) up.push_back(l);
      for (int l = m.gpu->num_layers() - 1; l >= 0; --l) down.push_back(l);
      EXPECT_EQ(hg.fwd, up);
      EXPECT_EQ(hg.bwd, down);
    }
}

TEST(GpuGpt, RunToRunBitwise) {
  REQUIRE_GPU();
  const GptConfig cfg{.vocab = 250, .padded_vocab = 256, .max_seq = 64, .n_layer = 2, .n_head = 4, .d_model = 64};
  std::vector<float> loss;
  std::vector<std::vector<float>> grads[2];
  for (int run = 0; run < 2; ++run) {
    Pair m(cfg);
    std::vector<int32_t> in, tgt;
    make_tokens(cfg.vocab, 4, 50, 5, in, tgt);
    DevHooks h(m.cpu.params());
    loss.push_back(m.gpu->forward({in.data(), tgt.data(), 4, 50}, h));
    m.gpu->backward(h);
    for (int p = 0; p < int(m.cpu.params().size()); ++p) grads[run].push_back(h.get(p));
  }
  EXPECT_EQ(std::memcmp(&loss[0], &loss[1], sizeof(float)), 0);
  for (size_t p = 0; p < grads[0].size(); ++p)
    EXPECT_EQ(std::memcmp(grads[0][p].data(), grads[1][p].data(), grads[0][p].size() * 4), 0) << "param " << p;
}

// The GPU GPT in FP8 compute against the CPU GPT in FP8 compute (the
// emulated GEMMs, fp32 activations): the same FP8 weights, so the differences
// are the GPU's bf16 activations and the codes they move by a step now and
// then. B*T = 111 (padded to 128 rows inside) and 256; d_model 128 (whole
// tiles) and 192 (every linear ends in a partial tile and partial 1x128
// blocks). Bounds: loss 1%, every gradient 8% (the bf16 comparison above
// allows 0.5% and 5%; FP8 codes of slightly different inputs add a few
// percent on the weight gradients).
TEST(GpuGpt, Fp8ComputeMatchesTheCpuFp8Gpt) {
  REQUIRE_GPU();
  for (int d_model : {128, 192}) {
    for (auto [B, T] : {std::pair{3, 37}, std::pair{4, 64}}) {
      SCOPED_TRACE("d_model " + std::to_string(d_model));
      const GptConfig cfg{.vocab = 250, .padded_vocab = 256, .max_seq = 64, .n_layer = 2, .n_head = d_model / 64,
                          .d_model = d_model};
      Pair m(cfg);
      m.cpu.set_fp8_compute({.on = true});
      m.gpu->set_fp8_compute({.on = true});
      ASSERT_TRUE(m.gpu->reads_fp8_weights());
      const Fp8Weights fw(m.cpu);
      std::vector<int32_t> in, tgt;
      make_tokens(cfg.vocab, B, T, 300 + B, in, tgt);
      const Batch batch{in.data(), tgt.data(), B, T};
      HostHooks hc0(m.cpu.params());
      DevHooks hg0(m.cpu.params());
      Fp8Hooks hc(hc0, fw, false), hg(hg0, fw, true);
      const float lc = m.cpu.forward(batch, hc), lg = m.gpu->forward(batch, hg);
      EXPECT_NEAR(lg, lc, 1e-2 * lc) << "loss B=" << B << " T=" << T;
      m.cpu.backward(hc);
      m.gpu->backward(hg);
      for (int p = 0; p < int(m.cpu.params().size()); ++p) {
        const double e = rel_err(hg0.get(p), hc0.g[size_t(p)]);
        EXPECT_LT(e, 8e-2) << m.cpu.params()[size_t(p)].name << " B=" << B << " T=" << T;
        if (m.cpu.params()[size_t(p)].fp8_linear) std::printf("  %-14s B=%d T=%d: gradient rel. error %.4f\n",
                                                             m.cpu.params()[size_t(p)].name.c_str(), B, T, e);
      }
      // The FP8 linears have no bf16 copy on the GPU.
      for (int p = 0; p < int(m.cpu.params().size()); ++p)
        if (m.cpu.params()[size_t(p)].fp8_linear) EXPECT_THROW(m.gpu->compute_weights(p), Error);
    }
  }
}

// The GPU GPT in FP8 compute as a test drives it: the FP8 weights of
// Fp8Weights (fixed: no optimizer steps), fp32 device gradients.
struct Fp8Gpt {
  Pair m;
  const Fp8Weights fw;
  DevHooks g;
  Fp8Hooks h;
  explicit Fp8Gpt(const GptConfig& cfg) : m(cfg), fw(m.cpu), g(m.cpu.params()), h(g, fw, true) {
    m.gpu->set_fp8_compute({.on = true});
  }
  // A micro-batch: forward + backward, its gradients added to g's; its loss.
  float step(const Batch& b) {
    const float loss = m.gpu->forward(b, h);
    m.gpu->backward(h);
    return loss;
  }
  void zero_grads() {
    for (size_t p = 0; p < g.g.size(); ++p) MXDP_CUDA_CHECK(cudaMemsetAsync(g.g[p], 0, size_t(g.n[p]) * 4, m.st.s));
  }
  std::vector<std::vector<float>> grads() const {
    std::vector<std::vector<float>> out;
    for (int p = 0; p < int(g.g.size()); ++p) out.push_back(g.get(p));
    return out;
  }
};
// Bitwise equality of two losses and of two sets of gradients, `what` in the messages.
void expect_bitwise(float loss, float loss_want, const std::vector<std::vector<float>>& got,
                    const std::vector<std::vector<float>>& want, const std::vector<ParamSpec>& params,
                    const std::string& what) {
  EXPECT_EQ(std::memcmp(&loss, &loss_want, sizeof(float)), 0) << what << ": loss " << loss << " vs " << loss_want;
  ASSERT_EQ(got.size(), want.size());
  for (size_t p = 0; p < got.size(); ++p)
    EXPECT_EQ(std::memcmp(got[p].data(), want[p].data(), got[p].size() * 4), 0) << what << ": " << params[p].name;
}

// --num-layers-at-start-in-bf16 1 --num-layers-at-end-in-bf16 1 on the GPU:
// three blocks, the middle one in FP8. Against the CPU GPT with the same
// blocks in bf16, within the bounds above (loss 1%, gradients 8%); only the
// middle block's four linears are read as FP8 (they alone have no bf16 copy),
// and a second forward and backward repeats the first bit for bit.
TEST(GpuGpt, Fp8ComputeWithBf16BlocksMatchesTheCpu) {
  REQUIRE_GPU();
  const GptConfig cfg{.vocab = 250, .padded_vocab = 256, .max_seq = 64, .n_layer = 3, .n_head = 3, .d_model = 192};
  const Fp8Compute c{.on = true, .bf16_first = 1, .bf16_last = 1};
  Pair m(cfg);
  m.cpu.set_fp8_compute(c);
  m.gpu->set_fp8_compute(c);
  int fp8 = 0;
  for (int p = 0; p < int(m.cpu.params().size()); ++p) {
    const ParamSpec& s = m.cpu.params()[size_t(p)];
    EXPECT_EQ(s.fp8_linear, m.gpu->params()[size_t(p)].fp8_linear) << s.name;
    EXPECT_EQ(s.fp8_linear, s.name.starts_with("h1.") && s.shape.size() == 2) << s.name;
    fp8 += s.fp8_linear;
    if (s.fp8_linear)
      EXPECT_THROW(m.gpu->compute_weights(p), Error) << s.name;
    else
      EXPECT_NO_THROW(m.gpu->compute_weights(p)) << s.name;
  }
  EXPECT_EQ(fp8, 4);
  const Fp8Weights fw(m.cpu);
  std::vector<int32_t> in, tgt;
  make_tokens(cfg.vocab, 3, 37, 301, in, tgt);
  const Batch batch{in.data(), tgt.data(), 3, 37};
  HostHooks hc0(m.cpu.params());
  DevHooks hg0(m.cpu.params());
  Fp8Hooks hc(hc0, fw, false), hg(hg0, fw, true);
  const float lc = m.cpu.forward(batch, hc), lg = m.gpu->forward(batch, hg);
  EXPECT_NEAR(lg, lc, 1e-2 * lc);
  m.cpu.backward(hc);
  m.gpu->backward(hg);
  std::vector<std::vector<float>> first;
  for (int p = 0; p < int(m.cpu.params().size()); ++p) {
    first.push_back(hg0.get(p));
    EXPECT_LT(rel_err(first.back(), hc0.g[size_t(p)]), 8e-2) << m.cpu.params()[size_t(p)].name;
  }
  for (int p = 0; p < int(m.cpu.params().size()); ++p)
    MXDP_CUDA_CHECK(cudaMemsetAsync(hg0.g[size_t(p)], 0, size_t(hg0.n[size_t(p)]) * 4, m.st.s));
  const float lg2 = m.gpu->forward(batch, hg);
  m.gpu->backward(hg);
  std::vector<std::vector<float>> second;
  for (int p = 0; p < int(m.cpu.params().size()); ++p) second.push_back(hg0.get(p));
  expect_bitwise(lg2, lg, second, first, m.cpu.params(), "a second pass");
}

TEST(GpuGpt, Fp8ComputeRunToRunBitwise) {
  REQUIRE_GPU();
  const GptConfig cfg{.vocab = 250, .padded_vocab = 256, .max_seq = 64, .n_layer = 2, .n_head = 2, .d_model = 128};
  std::vector<float> loss;
  std::vector<std::vector<float>> grads[2];
  for (int run = 0; run < 2; ++run) {
    Fp8Gpt m(cfg);
    std::vector<int32_t> in, tgt;
    make_tokens(cfg.vocab, 4, 50, 5, in, tgt);
    for (int step = 0; step < 2; ++step)  // the second replays the graphs the first captured
      loss.push_back(m.step({in.data(), tgt.data(), 4, 50}));
    grads[run] = m.grads();
  }
  for (int i = 0; i < 2; ++i) EXPECT_EQ(std::memcmp(&loss[i], &loss[2 + i], sizeof(float)), 0) << "forward " << i;
  EXPECT_EQ(std::memcmp(&loss[0], &loss[1], sizeof(float)), 0) << "the same forward twice (graph replay)";
  for (size_t p = 0; p < grads[0].size(); ++p)
    EXPECT_EQ(std::memcmp(grads[0][p].data(), grads[1][p].data(), grads[0][p].size() * 4), 0) << "param " << p;
}

// FP8 compute keeps per block what backward reads of the forward (among it the
// FP8 X^T operands the forward makes for the wgrads). A backward must read
// its own forward's, whatever ran before: other micro-batches, an eval forward
// (loss only) of the same shape, which writes the same per-block buffers, and
// forward_logits of another shape (the arena laid out again, the graphs
// captured again). Each case against a fresh model that ran only the
// micro-batch compared, bit for bit (loss and every gradient); then two
// micro-batches with an eval between them against the plain two. 3 blocks,
// B*T = 111 (Mp = 128: the padded rows in every per-block offset).
TEST(GpuGpt, Fp8ComputeBackwardReadsItsOwnForward) {
  REQUIRE_GPU();
  const GptConfig cfg{.vocab = 250, .padded_vocab = 256, .max_seq = 64, .n_layer = 3, .n_head = 2, .d_model = 128};
  const int B = 3, T = 37;
  std::vector<int32_t> in[3], tgt[3];
  for (int i = 0; i < 3; ++i) make_tokens(cfg.vocab, B, T, 400 + i, in[i], tgt[i]);
  const Batch a{in[0].data(), tgt[0].data(), B, T}, b{in[1].data(), tgt[1].data(), B, T};
  const Batch e{in[2].data(), tgt[2].data(), B, T};  // the eval's
  const std::vector<int32_t> prompt(2 * 20, 7);      // forward_logits: B 2, T 20 (64 inside)

  Fp8Gpt fresh(cfg);
  const float loss_b = fresh.step(b);
  const auto grads_b = fresh.grads();
  const std::vector<ParamSpec>& params = fresh.m.cpu.params();

  Fp8Gpt m(cfg);
  m.step(a);
  (void)m.m.gpu->forward(e, m.h);  // an eval: forward only
  m.zero_grads();
  float loss = m.step(b);
  expect_bitwise(loss, loss_b, m.grads(), grads_b, params, "after a micro-batch and an eval of its shape");
  m.m.gpu->forward_logits(prompt.data(), 2, 20, m.h);
  m.zero_grads();
  loss = m.step(b);
  expect_bitwise(loss, loss_b, m.grads(), grads_b, params, "after forward_logits of another shape");

  // Two micro-batches, an eval between them: the gradients of the plain two.
  Fp8Gpt plain(cfg), with_eval(cfg);
  const float plain_a = plain.step(a), plain_b = plain.step(b);
  const float eval_a = with_eval.step(a);
  (void)with_eval.m.gpu->forward(e, with_eval.h);
  const float eval_b = with_eval.step(b);
  EXPECT_EQ(std::memcmp(&eval_a, &plain_a, sizeof(float)), 0) << "micro-batch a";
  expect_bitwise(eval_b, plain_b, with_eval.grads(), plain.grads(), params, "two micro-batches with an eval between");
}

TEST(GpuGpt, InitIsTheCpuInitRoundedToBf16) {
  REQUIRE_GPU();
  const GptConfig cfg{.vocab = 250, .padded_vocab = 256, .max_seq = 64, .n_layer = 2, .n_head = 4, .d_model = 64};
  Stream st;
  Gpt cpu(cfg);
  cpu.init_weights(99);
  auto gpu = cuda::make_gpt(cfg, st.s);
  gpu->init_weights(99);
  for (int p = 0; p < int(cpu.params().size()); ++p) {
    const int64_t n = cpu.params()[p].numel();
    std::vector<float> init(n);
    MXDP_CUDA_CHECK(cudaMemcpy(init.data(), gpu->initial_weights(p), n * 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(std::memcmp(init.data(), cpu.weights(p), n * 4), 0) << "fp32 initial values of param " << p;
    std::vector<uint16_t> w(n);
    MXDP_CUDA_CHECK(cudaMemcpy(w.data(), gpu->compute_weights(p), n * 2, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(w[i], codec::bf16_from_f32(cpu.weights(p)[i])) << "param " << p << " at " << i;
  }
  // set_weights before the engine takes the initial values sets them too (--init-from).
  std::vector<float> mine(size_t(cpu.params()[2].numel()), 0.375f);
  gpu->set_weights(2, mine.data());
  std::vector<float> back(mine.size());
  MXDP_CUDA_CHECK(cudaMemcpy(back.data(), gpu->initial_weights(2), back.size() * 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(back, mine) << "set_weights did not reach the initial values";
  gpu->release_initial_weights();
  EXPECT_THROW(gpu->initial_weights(0), Error);
  EXPECT_THROW(gpu->weights(0), Error);
}

}  // namespace
