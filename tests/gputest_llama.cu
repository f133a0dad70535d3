// The GPU Llama (models/llama/cuda/) and its kernels against the CPU Llama
// (llama.h, llama_cpu.h), which computes the same model in fp32 and is itself
// held to transformers (test_llama_golden). Shares no code with the GPU side
// but the parameter list and the init.
//
// Inputs are rounded to bf16 first, so both sides see the same values and the
// differences come from the GPU's bf16 outputs and its summation orders only.
// Tolerances, as relative error of the whole tensor (||gpu - cpu|| / ||cpu||),
// the GPU GPT's (gputest_gpt.cu), for the same reasons:
//   - one bf16 rounding of an output: 2^-9 = 0.2% per element; we allow 1%
//     (2% for the attention backward: two roundings, and dk/dv summed over a group);
//   - fp32 sums of the same bf16 inputs in another order (RMSNorm's weight
//     gradient, rstd): 1e-4;
//   - a whole forward/backward of a small Llama in bf16: logits 2%, loss 0.5%,
//     gradients 5%.
// A wrong index, a missing term, a wrong rotation sign or a race is far beyond these.
// Then: bitwise the same run to run, and a short training run through the
// engine in every weight format (loss falls; CUDA graphs on and off agree bitwise).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "compare_util.h"
#include "engine/engine.h"
#include "formats/codec.h"
#include "gpu_test_util.h"
#include "models/cuda/attention.h"
#include "models/llama/cuda/llama_cuda.h"
#include "models/llama/cuda/llama_kernels.h"
#include "models/llama/llama.h"
#include "models/llama/llama_cpu.h"
#include "models/llama/spec.h"
#include "train/runtime.h"
#include "util/cuda_check.h"

using namespace mxdp;
using mxdp::gputest::DevHooks;
using mxdp::testing::bfr;
using mxdp::testing::rel_err;

namespace {

std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = bfr(scale * d(g));
  return v;
}

template <class T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) {
    MXDP_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
    MXDP_CUDA_CHECK(cudaMemset(p, 0xFF, std::max<size_t>(n, 1) * sizeof(T)));  // poison: NaN for floats
    MXDP_CUDA_CHECK(cudaDeviceSynchronize());  // before the kernels' non-blocking stream writes p
  }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  void put(const std::vector<T>& v) { MXDP_CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice)); }
};
struct Bf16 : Dev<uint16_t> {
  explicit Bf16(const std::vector<float>& v) : Dev<uint16_t>(v.size()) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = codec::bf16_from_f32(v[i]);
    put(h);
  }
  explicit Bf16(size_t count) : Dev<uint16_t>(count) {}
  std::vector<float> get() const {
    MXDP_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> h(n);
    MXDP_CUDA_CHECK(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
    std::vector<float> f(n);
    for (size_t i = 0; i < n; ++i) f[i] = codec::bf16_to_f32(h[i]);
    return f;
  }
};
struct F32 : Dev<float> {
  explicit F32(const std::vector<float>& v) : Dev<float>(v.size()) { put(v); }
  explicit F32(size_t count) : Dev<float>(count) {}
  std::vector<float> get() const {
    MXDP_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> h(n);
    MXDP_CUDA_CHECK(cudaMemcpy(h.data(), p, n * 4, cudaMemcpyDeviceToHost));
    return h;
  }
};

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { MXDP_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() {
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
};

// ---------------------------------------------------------------- kernels

TEST(GpuLlamaKernels, RmsNormForwardAndBackwardMatchCpu) {
  REQUIRE_GPU();
  Stream st;
  // 1200 rows: 10 chunks of the weight gradient; C = 2048 (Llama 3.2 1B) and 896 (Qwen2.5 0.5B).
  for (auto [M, C] : {std::pair{37, 64}, {1200, 896}, {300, 2048}}) {
    const float eps = 1e-5f;
    auto a = randn(size_t(M) * C, 1, 2.f), b = randn(size_t(M) * C, 2), w = randn(C, 3), d = randn(size_t(M) * C, 4);
    std::vector<float> x(a.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = bfr(a[i] + b[i]);  // the stored residual
    std::vector<float> out(x.size()), rstd(M), dx(x.size(), 0.f), dw(C, 0.25f);
    cpu::llama::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), M, C, eps);
    cpu::llama::rmsnorm_backward(dx.data(), dw.data(), d.data(), x.data(), w.data(), rstd.data(), M, C);
    Bf16 ga(a), gb(b), gw(w), gd(d), gx(x.size()), gout(x.size()), gout2(x.size()), gdx(x.size());
    F32 grstd(M), grstd2(M), gdw(std::vector<float>(C, 0.25f)), scratch(size_t(cuda::llama::rmsnorm_scratch_floats(M, C)));
    cuda::llama::residual_rmsnorm_forward(gx.p, gout.p, grstd.p, ga.p, gb.p, gw.p, M, C, eps, st.s);
    EXPECT_EQ(gx.get(), x) << "residual add C=" << C;
    cuda::llama::rmsnorm_forward(gout2.p, grstd2.p, gx.p, gw.p, M, C, eps, st.s);
    EXPECT_LT(rel_err(gout.get(), out), 1e-2) << "C=" << C;
    EXPECT_LT(rel_err(grstd.get(), rstd), 1e-5) << "C=" << C;
    EXPECT_EQ(gout2.get(), gout.get()) << "the plain and the fused RMSNorm differ, C=" << C;
    cuda::llama::rmsnorm_backward(gdx.p, false, gdw.p, scratch.p, gd.p, gx.p, gw.p, grstd.p, M, C, st.s);
    EXPECT_LT(rel_err(gdx.get(), dx), 1e-2) << "C=" << C;
    EXPECT_LT(rel_err(gdw.get(), dw), 1e-4) << "C=" << C;
    // Accumulating: adds onto what is there (the residual stream's gradient).
    cuda::llama::rmsnorm_backward(gdx.p, true, gdw.p, scratch.p, gd.p, gx.p, gw.p, grstd.p, M, C, st.s);
    cpu::llama::rmsnorm_backward(dx.data(), dw.data(), d.data(), x.data(), w.data(), rstd.data(), M, C);
    EXPECT_LT(rel_err(gdx.get(), dx), 1e-2) << "accumulate C=" << C;
    EXPECT_LT(rel_err(gdw.get(), dw), 1e-4) << "accumulate C=" << C;
  }
}

TEST(GpuLlamaKernels, RopeForwardAndInverseMatchCpu) {
  REQUIRE_GPU();
  Stream st;
  LlamaConfig c = llama_config("llama3.2-1b");  // llama3 scaling on the frequencies
  // hd 16 and 64 take the 8-pairs-a-thread kernel, hd 12 the scalar one.
  for (auto [NH, KV, hd] : {std::tuple{4, 2, 16}, {14, 2, 64}, {8, 8, 64}, {2, 1, 12}}) {
    const int B = 2, T = 70, S = (NH + 2 * KV) * hd, half = hd / 2;
    c.n_head = NH, c.n_kv_head = KV, c.head_dim = hd;
    const std::vector<float> f = llama_inv_freq(c);
    std::vector<float> cs(size_t(T) * half), sn(cs.size());
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < half; ++i) {
        cs[size_t(t) * half + i] = std::cos(float(t) * f[size_t(i)]);
        sn[size_t(t) * half + i] = std::sin(float(t) * f[size_t(i)]);
      }
    auto qkv = randn(size_t(B) * T * S, 5);
    F32 gcs(cs), gsn(sn);
    for (bool inverse : {false, true}) {
      std::vector<float> ref = qkv;
      cpu::llama::rope(ref.data(), f.data(), B, T, NH, KV, hd, inverse);
      Bf16 g(qkv);
      cuda::llama::rope(g.p, gcs.p, gsn.p, B, T, NH, KV, hd, inverse, st.s);
      const auto got = g.get();
      EXPECT_LT(rel_err(got, ref), 1e-2) << "NH=" << NH << " hd=" << hd << " inverse=" << inverse;
      for (int64_t m = 0; m < int64_t(B) * T; ++m)  // v untouched, bit for bit
        for (int i = (NH + KV) * hd; i < S; ++i) ASSERT_EQ(got[size_t(m * S + i)], qkv[size_t(m * S + i)]) << "v changed";
    }
  }
}

TEST(GpuLlamaKernels, SwigluForwardAndBackwardMatchCpu) {
  REQUIRE_GPU();
  Stream st;
  for (auto [M, F] : {std::pair{37, 192}, {300, 4864}}) {
    auto gu = randn(size_t(M) * 2 * F, 6, 2.f), d = randn(size_t(M) * F, 7);
    std::vector<float> out(size_t(M) * F), dgu(gu.size());
    cpu::llama::swiglu_forward(out.data(), gu.data(), M, F);
    cpu::llama::swiglu_backward(dgu.data(), d.data(), gu.data(), M, F);
    Bf16 ggu(gu), gd(d), gout(out.size()), gdgu(gu.size());
    cuda::llama::swiglu_forward(gout.p, ggu.p, M, F, st.s);
    cuda::llama::swiglu_backward(gdgu.p, gd.p, ggu.p, M, F, st.s);
    EXPECT_LT(rel_err(gout.get(), out), 1e-2) << "F=" << F;
    EXPECT_LT(rel_err(gdgu.get(), dgu), 1e-2) << "F=" << F;
  }
}

TEST(GpuLlamaKernels, GroupedQueryAttentionMatchesCpu) {
  REQUIRE_GPU();
  Stream st;
  cuda::Attention att(st.s);
  // (NH, KV): GQA groups of 2 and 7 (Qwen2.5: 14/2), MQA, and plain MHA.
  for (auto [B, T, NH, KV, hd] : {std::tuple{3, 37, 4, 2, 16}, {1, 130, 14, 2, 64}, {2, 64, 4, 1, 64}, {2, 40, 4, 4, 32}}) {
    const int S = (NH + 2 * KV) * hd, Q = NH * hd;
    auto qkv = randn(size_t(B) * T * S, 11), dout = randn(size_t(B) * T * Q, 12);
    std::vector<float> out(size_t(B) * T * Q), a(size_t(B) * NH * T * T), dqkv(qkv.size());
    cpu::llama::attention_forward(out.data(), a.data(), qkv.data(), B, T, NH, KV, hd);
    cpu::llama::attention_backward(dqkv.data(), dout.data(), qkv.data(), a.data(), B, T, NH, KV, hd);
    Bf16 gq(qkv), gout(out.size()), gd(dout), gdq(qkv.size());
    F32 stats(size_t(B) * NH * T);
    att.forward_gqa(gout.p, stats.p, gq.p, B, T, NH, KV, hd);
    att.backward_gqa(gdq.p, gd.p, gq.p, gout.p, stats.p, B, T, NH, KV, hd);
    const auto got = gdq.get();
    EXPECT_LT(rel_err(gout.get(), out), 1e-2) << "NH=" << NH << " KV=" << KV << " T=" << T;
    // q, k and v parts separately: a k/v head summed over the wrong group shows in its own part.
    auto part = [&](const std::vector<float>& v, int lo, int hi) {
      std::vector<float> r;
      for (int64_t m = 0; m < int64_t(B) * T; ++m) r.insert(r.end(), v.begin() + m * S + lo, v.begin() + m * S + hi);
      return r;
    };
    const int k0 = Q, v0 = Q + KV * hd;
    EXPECT_LT(rel_err(part(got, 0, k0), part(dqkv, 0, k0)), 3e-2) << "dq NH=" << NH << " KV=" << KV;
    EXPECT_LT(rel_err(part(got, k0, v0), part(dqkv, k0, v0)), 3e-2) << "dk NH=" << NH << " KV=" << KV;
    EXPECT_LT(rel_err(part(got, v0, S), part(dqkv, v0, S)), 3e-2) << "dv NH=" << NH << " KV=" << KV;
    att.backward_gqa(gdq.p, gd.p, gq.p, gout.p, stats.p, B, T, NH, KV, hd);
    const auto again = gdq.get();
    EXPECT_EQ(std::memcmp(got.data(), again.data(), got.size() * 4), 0) << "attention backward not repeatable";
  }
  EXPECT_THROW(att.forward_gqa(nullptr, nullptr, nullptr, 1, 8, 6, 4, 16), Error) << "6 heads over 4 kv heads";
}

TEST(GpuLlamaKernels, EmbeddingForwardExactAndBackwardBitwise) {
  REQUIRE_GPU();
  Stream st;
  const int M = 111, C = 64, V = 50;
  std::vector<int32_t> tok(M);
  std::mt19937 g(14);
  for (auto& t : tok) t = int32_t(g() % 7);  // many repeats: the order of the sums matters
  auto embed = randn(size_t(V) * C, 15), dx = randn(size_t(M) * C, 16);
  std::vector<float> x(size_t(M) * C), de(size_t(V) * C, 0.5f);
  for (int m = 0; m < M; ++m)
    for (int c = 0; c < C; ++c) x[size_t(m) * C + c] = embed[size_t(tok[m]) * C + c];
  std::vector<int32_t> order, seg_start, seg_token;
  for (int v = 0; v < V; ++v) {
    std::vector<float> s(C, 0.f);
    bool any = false;
    for (int m = 0; m < M; ++m)
      if (tok[m] == v) {
        if (!any) seg_start.push_back(int32_t(order.size())), seg_token.push_back(v), any = true;
        order.push_back(m);
        for (int c = 0; c < C; ++c) s[c] += dx[size_t(m) * C + c];
      }
    for (int c = 0; c < C; ++c) de[size_t(v) * C + c] += s[c];
  }
  seg_start.push_back(int32_t(order.size()));
  Dev<int32_t> gtok(tok.size()), gorder(order.size()), gstart(seg_start.size()), gsegtok(seg_token.size());
  gtok.put(tok), gorder.put(order), gstart.put(seg_start), gsegtok.put(seg_token);
  Bf16 gembed(embed), gx(x.size()), gdx(dx);
  F32 gde(std::vector<float>(de.size(), 0.5f));
  cuda::llama::embedding_forward(gx.p, gtok.p, gembed.p, M, C, st.s);
  cuda::llama::embedding_backward(gde.p, gdx.p, gorder.p, gstart.p, gsegtok.p, int(seg_token.size()), C, st.s);
  EXPECT_EQ(gx.get(), x) << "embedding forward";
  const auto got = gde.get();
  EXPECT_EQ(std::memcmp(got.data(), de.data(), de.size() * 4), 0) << "dembed";
}

// ---------------------------------------------------------------- the model

struct HostHooks final : ModelHooks {
  std::vector<std::vector<float>> g;
  explicit HostHooks(const std::vector<ParamSpec>& ps) {
    for (const auto& p : ps) g.emplace_back(p.numel(), 0.f);
  }
  void before_layer(int) override {}
  float* grad(int p) override { return g[size_t(p)].data(); }
  void after_layer_backward(int) override {}
};

// A Llama 3 (untied, llama3 rope scaling, GQA 4/2) and a Qwen2 (tied, q/k/v
// biases, GQA 8/2, d_model 512: several chunks in every column sum).
LlamaConfig llama3_small() {
  LlamaConfig c;
  c.vocab = 256, c.max_seq = 64, c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2, c.head_dim = 16, c.d_model = 64;
  c.d_ff = 192, c.rope_theta = 5e5, c.rope_scaling = {32.0, 1.0, 4.0, 8192}, c.tie_embeddings = false;
  return c;
}
LlamaConfig qwen2_small() {
  LlamaConfig c;
  c.vocab = 1000, c.max_seq = 64, c.n_layer = 2, c.n_head = 8, c.n_kv_head = 2, c.head_dim = 64, c.d_model = 512;
  c.d_ff = 1024, c.rms_eps = 1e-6, c.rope_theta = 1e6, c.qkv_bias = true, c.tie_embeddings = true;
  return c;
}

struct Pair {
  LlamaConfig cfg;
  Stream st;
  Llama cpu;
  std::unique_ptr<LlamaModel> gpu;
  explicit Pair(const LlamaConfig& c, bool graphs = true)
      : cfg(c), cpu(c), gpu(cuda::make_llama(c, st.s, {.cuda_graphs = graphs})) {
    cpu.init_weights(7);
    std::mt19937_64 g(8);
    std::normal_distribution<float> d(0.f, 0.1f);
    for (int p = 0; p < int(cpu.params().size()); ++p) {
      float* w = cpu.weights(p);
      const bool bias_or_norm = cpu.params()[size_t(p)].shape.size() == 1;
      for (int64_t i = 0; i < cpu.params()[size_t(p)].numel(); ++i) {
        if (bias_or_norm) w[i] += d(g);  // not all ones / zeros: their gradients' terms all show
        w[i] = bfr(w[i]);
      }
      gpu->set_weights(p, w);
    }
  }
};

void make_tokens(int V, int B, int T, uint64_t seed, std::vector<int32_t>& in, std::vector<int32_t>& tgt) {
  std::mt19937_64 g(seed);
  in.resize(size_t(B) * T);
  tgt.resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = int32_t(g() % uint64_t(V));
    tgt[i] = int32_t(g() % uint64_t(V));
  }
}

TEST(GpuLlama, LossLogitsAndEveryGradientMatchCpuLlama) {
  REQUIRE_GPU();
  for (const LlamaConfig& cfg : {llama3_small(), qwen2_small()})
    for (int B : {1, 3}) {
      const int T = 37;
      const std::string what = std::string(cfg.qkv_bias ? "qwen2" : "llama3") + " B=" + std::to_string(B);
      Pair m(cfg);
      std::vector<int32_t> in, tgt;
      make_tokens(cfg.vocab, B, T, 100 + B, in, tgt);
      NullHooks nh;
      m.cpu.forward_logits(in.data(), B, T, nh);
      m.gpu->forward_logits(in.data(), B, T, nh);
      for (int b = 0; b < B; ++b)
        EXPECT_LT(rel_err(m.gpu->logits_last(b), m.cpu.logits_last(b)), 2e-2) << "logits " << what << " b=" << b;
      HostHooks hc(m.cpu.params());
      DevHooks hg(m.cpu.params());
      const Batch batch{in.data(), tgt.data(), B, T};
      const float lc = m.cpu.forward(batch, hc), lg = m.gpu->forward(batch, hg);
      EXPECT_NEAR(lg, lc, 5e-3 * lc) << "loss " << what;
      m.cpu.backward(hc);
      m.gpu->backward(hg);
      for (int p = 0; p < int(m.cpu.params().size()); ++p) {
        const double e = rel_err(hg.get(p), hc.g[size_t(p)]);
        EXPECT_LT(e, 5e-2) << m.cpu.params()[size_t(p)].name << " " << what;
      }
      std::vector<int> up, down;
      for (int l = 0; l < m.gpu->num_layers(); ++l) up.push_back(l);
      for (int l = m.gpu->num_layers() - 1; l >= 0; --l) down.push_back(l);
      EXPECT_EQ(hg.fwd, up) << what;
      EXPECT_EQ(hg.bwd, down) << what;
    }
}

TEST(GpuLlama, RunToRunBitwiseAndGraphsChangeNoBit) {
  REQUIRE_GPU();
  for (const LlamaConfig& cfg : {llama3_small(), qwen2_small()}) {
    const std::string what = cfg.qkv_bias ? "qwen2" : "llama3";
    std::vector<float> loss;
    std::vector<std::vector<float>> grads[3];
    for (int run = 0; run < 3; ++run) {
      const bool graphs = run != 2;  // runs 0, 1: CUDA graphs; run 2: eager
      Pair m(cfg, graphs);
      std::vector<int32_t> in, tgt;
      make_tokens(cfg.vocab, 4, 50, 5, in, tgt);
      DevHooks h(m.cpu.params());  // one set of gradient buffers: the graphs' keys stay the same
      // With graphs, repetition 0 is eager and can grow the attention
      // workspace, which is in the key (the forward's cuDNN plan is built in
      // block 0, the backward's in the last block): segments after that see
      // their final key first in repetition 1 (eager), are captured in 2 and
      // replayed in 3. The fourth is compared: every segment a replay.
      const int reps = graphs ? 4 : 1;
      float l = 0.f;
      for (int rep = 0; rep < reps; ++rep) {
        // Zeroed on the model's stream. A cudaMemset goes on the legacy
        // default stream, which does not wait for the model's non-blocking
        // one: the previous repetition's backward, still running, added its
        // last gradients (block 0's attention half, the embedding) onto the
        // zeros.
        for (size_t p = 0; p < h.g.size(); ++p)
          MXDP_CUDA_CHECK(cudaMemsetAsync(h.g[p], 0, size_t(h.n[p]) * 4, m.st.s));
        l = m.gpu->forward({in.data(), tgt.data(), 4, 50}, h);
        m.gpu->backward(h);
      }
      loss.push_back(l);
      for (int p = 0; p < int(m.cpu.params().size()); ++p) grads[run].push_back(h.get(p));
      // Every segment has its graph (the loss, L + 2 forward, L + 1 backward
      // stages): a capture that failed would leave the comparison vacuous.
      EXPECT_EQ(cuda::llama_cuda_graphs(*m.gpu), graphs ? 2 * int64_t(cfg.n_layer) + 4 : 0) << what << " run " << run;
    }
    for (int run = 1; run < 3; ++run) {
      EXPECT_EQ(std::memcmp(&loss[0], &loss[size_t(run)], sizeof(float)), 0) << what << " loss, run " << run;
      for (size_t p = 0; p < grads[0].size(); ++p)
        EXPECT_EQ(std::memcmp(grads[0][p].data(), grads[run][p].data(), grads[0][p].size() * 4), 0)
            << what << " param " << p << ", run " << run << (run == 2 ? " (eager vs graphs)" : "");
    }
  }
}

TEST(GpuLlama, InitIsTheCpuInitRoundedToBf16) {
  REQUIRE_GPU();
  const LlamaConfig cfg = qwen2_small();
  Stream st;
  Llama cpu(cfg);
  cpu.init_weights(99);
  auto gpu = cuda::make_llama(cfg, st.s);
  gpu->init_weights(99);
  for (int p = 0; p < int(cpu.params().size()); ++p) {
    const int64_t n = cpu.params()[size_t(p)].numel();
    std::vector<float> init(static_cast<size_t>(n));
    MXDP_CUDA_CHECK(cudaMemcpy(init.data(), gpu->initial_weights(p), size_t(n) * 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(std::memcmp(init.data(), cpu.weights(p), size_t(n) * 4), 0) << "fp32 initial values of param " << p;
    std::vector<uint16_t> w(static_cast<size_t>(n));
    MXDP_CUDA_CHECK(cudaMemcpy(w.data(), gpu->compute_weights(p), size_t(n) * 2, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(w[size_t(i)], codec::bf16_from_f32(cpu.weights(p)[i])) << "param " << p << " at " << i;
  }
  gpu->release_initial_weights();
  EXPECT_THROW(gpu->initial_weights(0), Error);
  EXPECT_THROW(gpu->weights(0), Error);
}

// Through the engine, as `mxdp train --device cuda` runs it: the registry's
// builder, every weight format, 12 steps on 3 batches in turn whose targets
// are a function of the input token. The loss must fall by 15% at least, and an engine whose model runs every kernel eagerly
// (no CUDA graphs) must give the same bits.
TEST(GpuLlama, TrainsThroughTheEngineInEveryWeightFormat) {
  REQUIRE_GPU();
  if (!cuda_available()) GTEST_SKIP() << "this build cannot run the GPU engine (no NCCL or cuDNN)";
  const LlamaConfig cfg = qwen2_small();
  std::vector<std::vector<int32_t>> in(3), tgt(3);
  for (int i = 0; i < 3; ++i) {  // a target the model can learn: a fixed function of the input token
    make_tokens(cfg.vocab, 4, 32, 40 + i, in[size_t(i)], tgt[size_t(i)]);
    for (size_t j = 0; j < in[size_t(i)].size(); ++j) tgt[size_t(i)][j] = (in[size_t(i)][j] * 7 + 3) % cfg.vocab;
  }
  for (WeightFormat f : {WeightFormat::Bf16, WeightFormat::Mxfp8, WeightFormat::Nvfp4}) {
    std::vector<double> losses[2];
    for (int graphs = 1; graphs >= 0; --graphs) {
      auto comm = make_job_communicator(Device::Cuda, {});
      auto ops = make_engine_ops(Device::Cuda);
      std::unique_ptr<LanguageModel> model =
          graphs ? make_model(Device::Cuda, llama_model_config(cfg), *ops)
                 : cuda::make_llama(cfg, static_cast<cudaStream_t>(ops->stream()), {.cuda_graphs = false});
      model->init_weights(5);
      DpOptions o;
      o.weight_format = f;
      o.reuse_grad_buf = f == WeightFormat::Mxfp8;
      o.clip_grad = 1.0;
      o.lr = 3e-3;
      o.warmup_steps = 0;
      DataParallel engine(*model, *comm, o, ops.get());
      for (int s = 0; s < 12; ++s) {
        const int i = s % 3;
        losses[graphs].push_back(engine.train_step({Batch{in[size_t(i)].data(), tgt[size_t(i)].data(), 4, 32}}).loss);
      }
    }
    const auto& l = losses[1];
    for (double x : l) ASSERT_TRUE(std::isfinite(x)) << to_string(f);
    EXPECT_LT(l.back(), 0.85 * l.front()) << to_string(f) << ": the loss did not fall (" << l.front() << " -> "
                                          << l.back() << ")";
    EXPECT_TRUE(mxdp::testing::same_bits(losses[0], losses[1])) << to_string(f) << ": graphs on and off differ";
  }
}

}  // namespace
