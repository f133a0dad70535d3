// The block-scaled FP8 GEMMs (models/cuda/fp8_gemm.h) at GPT-2 124M and 774M
// linear-layer shapes, M = 1024 tokens, against two references computed here
// by a naive double-accumulating kernel:
//   exact  : the product of the dequantized operands (what the FP8 GEMM must
//            compute, up to its fp32 accumulation and the bf16 output): relative
//            Frobenius error <= 5e-3 (bf16 output; 1e-3 for the fp32 wgrad),
//            and every element within 1% of the largest.
//   fp32   : the product of the unquantized fp32 inputs (the cost of E4M3 with
//            1x128 / 128x128 scales): relative Frobenius error <= 0.08 (printed).
// The inputs are scaled by powers of two per row, per 128-column block and per
// 128-row weight block, so a scale read from the wrong place is a large error.
// Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "formats/codec.h"
#include "formats/cuda/fp8_block_cuda.h"
#include "formats/fp8_block.h"
#include "gpu_arrays.h"
#include "gpu_test_util.h"
#include "models/cuda/cublaslt_plans.h"
#include "models/cuda/fp8_gemm.h"
#include "models/cuda/gemm.h"
#include "models/cuda/fp8_gemm_sm90.h"
#include "models/cuda/fp8_linear.h"
#include "util/cuda_check.h"

namespace mxdp {
namespace {

// Zero-filled device arrays: outputs the tests read start from zero.
template <class T>
using Dev = gputest::Dev<T, 0>;

// d[i,j] = sum_k a[i,k] b[j,k] in double (both row-major, K innermost).
__global__ void ref_nt(const float* a, const float* b, int M, int N, int K, double* d) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
  if (j >= N) return;
  double acc = 0.0;
  for (int k = 0; k < K; ++k) acc += double(a[int64_t(i) * K + k]) * double(b[int64_t(j) * K + k]);
  d[int64_t(i) * N + j] = acc;
}
std::vector<double> reference(const Dev<float>& a, const Dev<float>& b, int M, int N, int K) {
  Dev<double> d(size_t(M) * N);
  ref_nt<<<dim3((N + 127) / 128, M), 128>>>(a.p, b.p, M, N, K, d.p);
  MXDP_CUDA_CHECK_LAUNCH();
  return d.get();
}

// rows x cols, N(0, sigma) scaled by 2^(r % 5 - 2) and 2^((c / 128) % 3 - 1).
std::vector<float> input(int rows, int cols, float sigma, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> x(size_t(rows) * cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      x[size_t(r) * cols + c] = d(g) * std::ldexp(1.0f, r % 5 - 2 + (c / 128) % 3 - 1 + (r / 128) % 2);
  return x;
}
std::vector<float> transpose(const std::vector<float>& x, int rows, int cols) {
  std::vector<float> t(x.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) t[size_t(c) * rows + r] = x[size_t(r) * cols + c];
  return t;
}
float bf16(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Err {
  double frob, max_elem;  // ||d - r|| / ||r||; max |d - r| / max |r|
};
template <class F>
Err error_of(F got, const std::vector<double>& want) {
  double num = 0, den = 0, mx = 0, mr = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = got(i) - want[i];
    num += e * e;
    den += want[i] * want[i];
    mx = std::max(mx, std::fabs(e));
    mr = std::max(mr, std::fabs(want[i]));
  }
  return {std::sqrt(num / den), mx / mr};
}

// A 1x128 operand (rows x K) on the device, quantized from fp32, and its dequantized fp32.
struct Act {
  Dev<uint8_t> q;
  Dev<float> s, y;
  Act(const Dev<float>& x, int rows, int K, bool transposed)
      : q(size_t(rows) * K), s(fp8_1x128_scale_count(rows, K)), y(size_t(rows) * K) {
    // transposed: x is K x rows, the operand its transpose.
    if (transposed)
      cuda::fp8_quantize_1x128_transposed(x.p, K, rows, Fp8Kind::E4M3, q.p, s.p, 0);
    else
      cuda::fp8_quantize_1x128(x.p, rows, K, Fp8Kind::E4M3, q.p, s.p, 0);
    cuda::fp8_dequantize_1x128(q.p, s.p, rows, K, Fp8Kind::E4M3, y.p, 0);
  }
  Fp8Operand op() const { return {q.p, s.p, Fp8Kind::E4M3, Fp8Scaling::Rows1x128}; }
};
// A weight (rows x K) in fp8b128 tiles: compact scales, GEMM scales, dequantized fp32.
struct Tiles {
  Dev<uint8_t> q;
  Dev<float> s, g, y;
  Tiles(int rows, int K) : q(size_t(rows) * K), s(fp8b128_scale_count(rows, K)), g(fp8b128_gemm_scale_count(rows, K)),
                           y(size_t(rows) * K) {}
  void finish(int rows, int K) {
    cuda::fp8b128_scales_for_gemm(s.p, rows, K, g.p, 0);
    cuda::fp8b128_dequantize(q.p, s.p, rows, K, y.p, 0);
  }
  Fp8Operand op() const { return {q.p, g.p, Fp8Kind::E4M3, Fp8Scaling::Tiles128}; }
};

struct Shape {
  const char* name;
  int N, K;
};
const Shape kShapes[] = {
    {"124m attn.qkv", 2304, 768}, {"124m attn.proj", 768, 768},   {"124m mlp.fc", 3072, 768},
    {"124m mlp.proj", 768, 3072}, {"774m attn.qkv", 3840, 1280}, {"774m attn.proj", 1280, 1280},
    {"774m mlp.fc", 5120, 1280},  {"774m mlp.proj", 1280, 5120},
};
constexpr int kM = 1024;

// The three GEMMs of one linear layer (M tokens, W {N, K}) against both
// references, with the bounds above, and fprop run twice for the same bits.
void check_linear(cuda::Fp8Gemm& gemm, const char* name, int M, int N, int K, uint32_t seed) {
  SCOPED_TRACE(name);
  const auto hx = input(M, K, 1.0f, seed), hw = input(N, K, 0.02f, seed + 1), hdy = input(M, N, 1e-3f, seed + 2);
  Dev<float> x(hx), w(hw), dy(hdy), wt(transpose(hw, N, K)), xt(transpose(hx, M, K)), dyt(transpose(hdy, M, N));
  // Operands: X and dY 1x128 along K / N; X^T and dY^T 1x128 along M; W tiles and their transpose.
  Act qx(x, M, K, false), qdy(dy, M, N, false), qxt(x, K, M, true), qdyt(dy, N, M, true);
  Tiles qw(N, K), qwt(K, N);
  cuda::fp8b128_quantize(w.p, N, K, qw.q.p, qw.s.p, 0);
  qw.finish(N, K);
  cuda::fp8b128_transpose(qw.q.p, qw.s.p, N, K, qwt.q.p, qwt.s.p, 0);
  qwt.finish(K, N);

  // fprop
  Dev<uint16_t> y(size_t(M) * N), y2(size_t(M) * N);
  gemm.fprop(qx.op(), qw.op(), M, N, K, y.p);
  gemm.fprop(qx.op(), qw.op(), M, N, K, y2.p);
  const auto hy = y.get();
  EXPECT_EQ(hy, y2.get()) << "fprop is not run to run deterministic";
  const Err fe = error_of([&](size_t i) { return double(bf16(hy[i])); }, reference(qx.y, qw.y, M, N, K));
  const Err ff = error_of([&](size_t i) { return double(bf16(hy[i])); }, reference(x, w, M, N, K));
  // dgrad: dX = dY W through the transposed tiles.
  Dev<uint16_t> dx(size_t(M) * K);
  gemm.dgrad(qdy.op(), qwt.op(), M, N, K, dx.p);
  const auto hdx = dx.get();
  const Err de = error_of([&](size_t i) { return double(bf16(hdx[i])); }, reference(qdy.y, qwt.y, M, K, N));
  const Err df = error_of([&](size_t i) { return double(bf16(hdx[i])); }, reference(dy, wt, M, K, N));
  // wgrad: dW += dY^T X into an fp32 grad holding 1.0 everywhere.
  Dev<float> dw(std::vector<float>(size_t(N) * K, 1.0f));
  gemm.wgrad(qdyt.op(), qxt.op(), M, N, K, dw.p);
  const auto hdw = dw.get();
  const Err we = error_of([&](size_t i) { return double(hdw[i]) - 1.0; }, reference(qdyt.y, qxt.y, N, K, M));
  const Err wf = error_of([&](size_t i) { return double(hdw[i]) - 1.0; }, reference(dyt, xt, N, K, M));
  std::printf("%-16s M %d N %5d K %5d | vs dequantized: fprop %.2e dgrad %.2e wgrad %.2e | vs fp32 inputs: "
              "fprop %.4f dgrad %.4f wgrad %.4f\n",
              name, M, N, K, fe.frob, de.frob, we.frob, ff.frob, df.frob, wf.frob);
  EXPECT_LE(fe.frob, 5e-3);
  EXPECT_LE(de.frob, 5e-3);
  EXPECT_LE(we.frob, 1e-3);
  EXPECT_LE(fe.max_elem, 1e-2);
  EXPECT_LE(de.max_elem, 1e-2);
  EXPECT_LE(we.max_elem, 1e-2);
  EXPECT_LE(ff.frob, 0.08);
  EXPECT_LE(df.frob, 0.08);
  EXPECT_LE(wf.frob, 0.08);
}

TEST(GpuFp8Gemm, LinearLayerGemmsAgainstFp32References) {
  if (!gputest::have_gpu()) GTEST_SKIP() << "no CUDA device";
  cuda::Fp8Gemm gemm(0);
  uint32_t seed = 7;
  for (const Shape& sh : kShapes) check_linear(gemm, sh.name, kM, sh.N, sh.K, seed += 3);
  EXPECT_GE(gemm.cached_shapes(), 1u);
  EXPECT_LE(gemm.cached_shapes(), 3 * std::size(kShapes));  // shapes that coincide share a plan
}

// GPT-2 1558M's widths (d_model 1600 = 12.5 x 128): N and K that end in a
// partial block or tile, whose scales cover only the elements present (the
// layouts of formats/fp8_block.h, ceil(cols / 128) blocks a row).
TEST(GpuFp8Gemm, PartialBlocksAgainstFp32References) {
  if (!gputest::have_gpu()) GTEST_SKIP() << "no CUDA device";
  cuda::Fp8Gemm gemm(0);
  uint32_t seed = 301;
  for (const Shape& sh : {Shape{"1558m attn.qkv", 4800, 1600}, Shape{"1558m attn.proj", 1600, 1600},
                          Shape{"1558m mlp.fc", 6400, 1600}, Shape{"1558m mlp.proj", 1600, 6400}})
    check_linear(gemm, sh.name, kM, sh.N, sh.K, seed += 3);
}

// The wgrads of GPT-2 124M's MLP at a training step's token count (B 16 x T
// 1024), the shapes where Fp8Gemm passes over the heuristic's first answer
// (a 192x64 tile) for its next: against the double reference, and the same
// bits on a second run from the same gradient.
TEST(GpuFp8Gemm, WgradAtATrainingStepsTokenCount) {
  if (!gputest::have_gpu()) GTEST_SKIP() << "no CUDA device";
  cuda::Fp8Gemm gemm(0);
  const int M = 16384;
  uint32_t seed = 101;
  for (const Shape& sh : {kShapes[2], kShapes[3]}) {
    SCOPED_TRACE(sh.name);
    const int N = sh.N, K = sh.K;
    Dev<float> x(input(M, K, 1.0f, seed++)), dy(input(M, N, 1e-3f, seed++));
    Act qxt(x, K, M, true), qdyt(dy, N, M, true);
    const std::vector<float> ones(size_t(N) * K, 1.0f);
    Dev<float> dw(ones), dw2(ones);
    gemm.wgrad(qdyt.op(), qxt.op(), M, N, K, dw.p);
    gemm.wgrad(qdyt.op(), qxt.op(), M, N, K, dw2.p);
    const auto hdw = dw.get();
    EXPECT_EQ(std::memcmp(hdw.data(), dw2.get().data(), hdw.size() * sizeof(float)), 0)
        << "wgrad is not run to run deterministic";
    const Err we = error_of([&](size_t i) { return double(hdw[i]) - 1.0; }, reference(qdyt.y, qxt.y, N, K, M));
    std::printf("%-16s M %d N %5d K %5d | wgrad vs dequantized %.2e (max element %.2e)\n", sh.name, M, N, K, we.frob,
                we.max_elem);
    EXPECT_LE(we.frob, 1e-3);
    EXPECT_LE(we.max_elem, 1e-2);
  }
}

TEST(GpuFp8Gemm, BadShapesAreErrors) {
  if (!gputest::have_gpu()) GTEST_SKIP() << "no CUDA device";
  cuda::Fp8Gemm gemm(0);
  Dev<uint8_t> q(256 * 256);
  Dev<float> s(256 * 4);
  Dev<uint16_t> d(256 * 256);
  const Fp8Operand a{q.p, s.p, Fp8Kind::E4M3, Fp8Scaling::Rows1x128}, t{q.p, s.p, Fp8Kind::E4M3, Fp8Scaling::Tiles128};
  EXPECT_THROW(gemm.nt(a, t, 100, 256, 256, d.p), Error);  // M not a multiple of 16
  EXPECT_THROW(gemm.nt(a, t, 256, 200, 256, d.p), Error);  // N not a multiple of 16
  EXPECT_THROW(gemm.nt(a, t, 256, 256, 120, d.p), Error);  // K not a multiple of 16
  EXPECT_THROW(gemm.nt(t, t, 256, 256, 256, d.p), Error);
}

// The own GEMM's three errors, printed and bounded: e against the product of
// the dequantized operands (frob within `bound`, every element within 1e-2), f
// against that of the fp32 inputs (0.08: the quantization's own error), l
// against cuBLASLt's output on the same operands (within `bound`).
void expect_own_errors(const char* what, const char* name, int M, int N, int K, const Err& e, const Err& f,
                       const Err& l, double bound) {
  std::printf("%s %-15s M %5d N %5d K %5d | vs dequantized %.2e (max %.2e) | vs fp32 inputs %.4f | vs cuBLASLt %.2e\n",
              what, name, M, N, K, e.frob, e.max_elem, f.frob, l.frob);
  EXPECT_LE(e.frob, bound);
  EXPECT_LE(e.max_elem, 1e-2);
  EXPECT_LE(f.frob, 0.08);
  EXPECT_LE(l.frob, bound);
}

// Each wrapper's outputs (bytes, and what each is) for one ClusterChoice, the
// cluster shape each of its plans ran, and how many candidates it refused for
// bits other than the heuristic's.
struct ClusterRun {
  std::vector<std::vector<uint8_t>> outputs;
  std::vector<std::string> names;
  std::vector<uint16_t> clusters;
  size_t refused = 0;

  // One output of the N x K linear's GEMM `what`.
  template <class Buffer>
  void add(int N, int K, const char* what, const Buffer& out) {
    outputs.push_back(out.bytes());
    names.push_back(std::to_string(N) + "x" + std::to_string(K) + " " + what);
  }
  // What the wrapper chose, once every GEMM has run.
  template <class Wrapper>
  void finish(const Wrapper& gemm) {
    clusters = gemm.plan_clusters();
    refused = gemm.clusters_refused();
  }
};

// GPT-2 1558M's four block linears (N, K): qkv, attn.proj, fc, mlp.proj, at 4096 tokens.
constexpr std::pair<int, int> k1558Linears[] = {{4800, 1600}, {1600, 1600}, {6400, 1600}, {1600, 6400}};
constexpr int kClusterM = 4096;

// Their FP8 operands, made once; run() does each linear's GEMMs through an
// Fp8Gemm of the given choice: fprop, fprop with the bias epilogue, dgrad and wgrad.
struct Fp8Linears {
  struct Layer {
    int N, K;
    std::unique_ptr<Act> qx, qdy, qxt, qdyt;
    std::unique_ptr<Tiles> qw, qwt;
    std::unique_ptr<Dev<uint16_t>> bias;
  };
  std::vector<Layer> layers;
  Fp8Linears() {
    const int M = kClusterM;
    uint32_t seed = 500;
    for (const auto& [N, K] : k1558Linears) {
      Dev<float> x(input(M, K, 1.0f, seed)), w(input(N, K, 0.02f, seed + 1)), dy(input(M, N, 1e-3f, seed + 2));
      seed += 3;
      Layer l{N, K};
      l.qx = std::make_unique<Act>(x, M, K, false);
      l.qdy = std::make_unique<Act>(dy, M, N, false);
      l.qxt = std::make_unique<Act>(x, K, M, true);
      l.qdyt = std::make_unique<Act>(dy, N, M, true);
      l.qw = std::make_unique<Tiles>(N, K);
      l.qwt = std::make_unique<Tiles>(K, N);
      cuda::fp8b128_quantize(w.p, N, K, l.qw->q.p, l.qw->s.p, 0);
      l.qw->finish(N, K);
      cuda::fp8b128_transpose(l.qw->q.p, l.qw->s.p, N, K, l.qwt->q.p, l.qwt->s.p, 0);
      l.qwt->finish(K, N);
      l.bias = std::make_unique<Dev<uint16_t>>(std::vector<uint16_t>(N, 0x3c00));  // bf16 0.0078125
      layers.push_back(std::move(l));
    }
  }
  ClusterRun run(cuda::ClusterChoice choice) const {
    const int M = kClusterM;
    cuda::Fp8Gemm gemm(0, true, choice);
    ClusterRun r;
    for (const Layer& l : layers) {
      const int N = l.N, K = l.K;
      Dev<uint16_t> y(size_t(M) * N), yb(size_t(M) * N), dx(size_t(M) * K);
      Dev<float> dw(std::vector<float>(size_t(N) * K, 1.0f));
      gemm.fprop(l.qx->op(), l.qw->op(), M, N, K, y.p);
      if (!gemm.nt_bias(l.qx->op(), l.qw->op(), M, N, K, l.bias->p, yb.p))
        gemm.fprop(l.qx->op(), l.qw->op(), M, N, K, yb.p);
      gemm.dgrad(l.qdy->op(), l.qwt->op(), M, N, K, dx.p);
      gemm.wgrad(l.qdyt->op(), l.qxt->op(), M, N, K, dw.p);
      r.add(N, K, "fprop", y);
      r.add(N, K, "fprop+bias", yb);
      r.add(N, K, "dgrad", dx);
      r.add(N, K, "wgrad", dw);
    }
    r.finish(gemm);
    return r;
  }
};

// The same linears' bf16 operands; run() goes through a bf16 Gemm: forward
// plain, with bias, with bias and GELU (its aux out too), backward_data plain
// and through the dGELU, and backward_weight.
struct Bf16Linears {
  struct Layer {
    int N, K;
    std::unique_ptr<gputest::Bf16> x, w, dy, b, pre;  // pre: dinp's shape
  };
  std::vector<Layer> layers;
  Bf16Linears() {
    const int M = kClusterM;
    uint32_t seed = 600;
    for (const auto& [N, K] : k1558Linears) {
      Layer l{N, K};
      l.x = std::make_unique<gputest::Bf16>(input(M, K, 1.0f, seed));
      l.w = std::make_unique<gputest::Bf16>(input(N, K, 0.02f, seed + 1));
      l.dy = std::make_unique<gputest::Bf16>(input(M, N, 1e-3f, seed + 2));
      l.b = std::make_unique<gputest::Bf16>(input(1, N, 0.1f, seed + 3));
      l.pre = std::make_unique<gputest::Bf16>(input(M, K, 1.0f, seed + 4));
      seed += 5;
      layers.push_back(std::move(l));
    }
  }
  ClusterRun run(cuda::ClusterChoice choice) const {
    const int M = kClusterM;
    cuda::Gemm gemm(0, true, choice);
    ClusterRun r;
    for (const Layer& l : layers) {
      const int N = l.N, K = l.K;
      gputest::Bf16 y(size_t(M) * N), yb(size_t(M) * N), yg(size_t(M) * N), aux(size_t(M) * N), dx(size_t(M) * K),
          dxg(size_t(M) * K);
      Dev<float> dw(std::vector<float>(size_t(N) * K, 1.0f));
      gemm.forward(y.p, l.x->p, l.w->p, nullptr, M, N, K, nullptr);
      gemm.forward(yb.p, l.x->p, l.w->p, l.b->p, M, N, K, nullptr);
      gemm.forward(yg.p, l.x->p, l.w->p, l.b->p, M, N, K, aux.p);
      gemm.backward_data(dx.p, l.dy->p, l.w->p, M, N, K, nullptr);
      gemm.backward_data(dxg.p, l.dy->p, l.w->p, M, N, K, l.pre->p);
      gemm.backward_weight(dw.p, l.dy->p, l.x->p, M, N, K);
      r.add(N, K, "forward", y);
      r.add(N, K, "forward+bias", yb);
      r.add(N, K, "forward+bias+GELU", yg);
      r.add(N, K, "forward+bias+GELU aux", aux);
      r.add(N, K, "backward_data", dx);
      r.add(N, K, "backward_data dGELU", dxg);
      r.add(N, K, "backward_weight", dw);
    }
    r.finish(gemm);
    return r;
  }
};

// Every choice gives the heuristic's bits on every output of both wrappers:
// each shape the timed choice tries, fixed, and the timed choice itself,
// against the heuristic's outputs byte for byte. A shape that keeps the bits
// may move a plan; one that does not must be refused by choose_cluster's hash
// check (cluster_choice.h), as a 4x1 cluster on the bf16 dGELU epilogue (the
// "backward_data dGELU" outputs) is on an H100, where that shape changed the
// bits while the epilogue's plans could still move. The refusals are printed
// per choice. The fixed shapes must move some plans off the heuristic's
// cluster, or the test would compare nothing.
template <class Linears>
void expect_cluster_invariance() {
  const Linears linears;
  auto gemms = [&](cuda::ClusterChoice c) { return linears.run(c); };
  const ClusterRun ref = gemms({cuda::ClusterChoice::kHeuristic});
  EXPECT_EQ(ref.refused, 0u);  // kHeuristic compares nothing
  int moved = 0;
  std::vector<cuda::ClusterChoice> choices{{cuda::ClusterChoice::kFastest}};
  for (uint16_t shape : cuda::kClusterShapes) choices.push_back({cuda::ClusterChoice::kFixed, shape});
  for (const cuda::ClusterChoice& c : choices) {
    const std::string choice =
        c.mode == cuda::ClusterChoice::kFastest ? std::string("fastest") : "fixed shape " + std::to_string(c.shape);
    SCOPED_TRACE("cluster choice " + choice);
    const ClusterRun got = gemms(c);
    ASSERT_EQ(got.outputs.size(), ref.outputs.size());
    for (size_t i = 0; i < ref.outputs.size(); ++i)
      EXPECT_TRUE(got.outputs[i] == ref.outputs[i]) << "output " << i << " (" << ref.names[i] << ")";
    ASSERT_EQ(got.clusters.size(), ref.clusters.size());
    int moved_here = 0;
    for (size_t i = 0; i < ref.clusters.size(); ++i) moved_here += got.clusters[i] != ref.clusters[i];
    moved += moved_here;
    std::printf("%-15s %2d plans on a cluster other than the heuristic's, %zu candidates refused for other bits\n",
                choice.c_str(), moved_here, got.refused);
  }
  std::printf("%zu plans; %d plan runs on a cluster shape other than the heuristic's, each with its bits\n",
              ref.clusters.size(), moved);
  EXPECT_GT(moved, 0);
}

TEST(GpuGemmClusters, Fp8EveryClusterShapeGivesTheHeuristicsBits) {
  if (!gputest::have_gpu()) GTEST_SKIP() << "no CUDA device";
  expect_cluster_invariance<Fp8Linears>();
}

TEST(GpuGemmClusters, Bf16EveryClusterShapeGivesTheHeuristicsBits) {
  if (!gputest::have_gpu()) GTEST_SKIP() << "no CUDA device";
  expect_cluster_invariance<Bf16Linears>();
}

// choose_cluster against a candidate with other bits. The GEMMs that change
// bits with their cluster are not at hand on every device, so one is
// simulated: a plan of the test's own (bf16 D = A^T B, 1558M's fc forward:
// m 6400, n 4096, k 1600), and a run that enqueues the real GEMM and, under
// one cluster shape cuBLASLt accepts for it (the "odd" one), then flips a
// bit of D. The odd shape runs the GEMM once where every other algorithm runs
// it three times, so it is the fastest by far: without the flip the timed
// choice takes it (the control), with the flip it is refused all the same.
__global__ void flip_first_bit(uint16_t* d) { d[0] ^= 1; }

struct OddCluster {
  static constexpr int m = 6400, n = 4096, k = 1600;
  gputest::Bf16 a{input(k, m, 0.02f, 700)}, b{input(k, n, 1.0f, 701)};
  Dev<uint16_t> d{size_t(m) * n};
  gputest::Stream stream;

  // The plan's own, then choose_cluster under `choice` (kFixed: on the odd
  // shape): the cluster shape it keeps, and the candidates it refused. odd 0
  // (kFastest only): the first shape cuBLASLt accepts other than the
  // heuristic's (none: odd stays 0 and nothing is chosen).
  struct Chosen {
    uint16_t heuristic, odd, kept;
    size_t refused;
  };
  Chosen choose(cuda::ClusterChoice choice, uint16_t odd, bool flip) {
    if (choice.mode == cuda::ClusterChoice::kFixed) choice.shape = odd;
    cuda::CublasLtPlans<int> lt(stream.s, true, choice);
    cuda::CublasLtPlan& p = lt.get(0, [&](cuda::CublasLtPlan& q) {
      MXDP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&q.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      const cublasOperation_t t = CUBLAS_OP_T;
      MXDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(q.desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
      MXDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&q.a, CUDA_R_16BF, k, m, k));
      MXDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&q.b, CUDA_R_16BF, k, n, k));
      MXDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&q.cd, CUDA_R_16BF, m, n, m));
      cublasLtMatmulHeuristicResult_t res{};
      int found = 0;
      MXDP_CUBLAS_CHECK(lt.heuristic(q, false, 1, &res, &found));
      MXDP_CHECK(found > 0, "test: cuBLASLt has no bf16 algorithm for the odd-cluster GEMM");
      q.algo = res.algo;
    });
    Chosen c{cuda::cluster_of(p.algo), odd, 0, 0};
    for (uint16_t shape : cuda::kClusterShapes)
      if (c.odd == 0 && shape != c.heuristic && accepts(lt, p, shape)) c.odd = shape;
    const float alpha = 1.0f, beta = 0.0f;
    auto run = [&](const cublasLtMatmulAlgo_t& algo) {
      const bool odd_one = cuda::cluster_of(algo) == c.odd;
      for (int i = 0; i < (odd_one ? 1 : 3); ++i) {
        const cublasStatus_t st = cublasLtMatmul(lt.handle(), p.desc, &alpha, a.p, p.a, b.p, p.b, &beta, d.p, p.cd, d.p,
                                                 p.cd, &algo, lt.workspace(), lt.kWorkspace, lt.stream());
        if (st != CUBLAS_STATUS_SUCCESS) return st;
      }
      if (odd_one && flip) {
        flip_first_bit<<<1, 1, 0, lt.stream()>>>(d.p);
        MXDP_CUDA_CHECK_LAUNCH();
      }
      return CUBLAS_STATUS_SUCCESS;
    };
    if (c.odd == 0) return c;
    const cuda::GemmOutput out[] = {{d.p, d.n * sizeof(uint16_t)}};
    lt.choose_cluster(p, true, out, run);
    c.kept = cuda::cluster_of(p.algo);
    c.refused = lt.refused();
    return c;
  }

  // Whether cuBLASLt runs p's algorithm with that cluster shape (as choose_cluster asks it).
  static bool accepts(const cuda::CublasLtPlans<int>& lt, const cuda::CublasLtPlan& p, uint16_t shape) {
    cublasLtMatmulAlgo_t algo = p.algo;
    cublasLtMatmulHeuristicResult_t check{};
    return cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &shape, sizeof shape) ==
               CUBLAS_STATUS_SUCCESS &&
           cublasLtMatmulAlgoCheck(lt.handle(), p.desc, p.a, p.b, p.cd, p.cd, &algo, &check) == CUBLAS_STATUS_SUCCESS &&
           check.workspaceSize <= lt.kWorkspace;
  }
};

TEST(GpuGemmClusters, CandidateWithOtherBitsIsRefused) {
  if (!gputest::have_gpu()) GTEST_SKIP() << "no CUDA device";
  OddCluster g;
  const cuda::ClusterChoice fastest{cuda::ClusterChoice::kFastest};
  const OddCluster::Chosen control = g.choose(fastest, 0, false);
  if (control.odd == 0) GTEST_SKIP() << "cuBLASLt accepts no other cluster shape for this GEMM on this device";
  std::printf("heuristic's cluster %d, odd one %d\n", int(control.heuristic), int(control.odd));
  // Control: the odd shape, three times faster and with the same bits, is the timed choice.
  EXPECT_EQ(control.kept, control.odd);
  EXPECT_EQ(control.refused, 0u);
  // Its bits changed: refused, however fast; another shape with the heuristic's bits may win.
  const OddCluster::Chosen flipped = g.choose(fastest, control.odd, true);
  EXPECT_NE(flipped.kept, control.odd);
  EXPECT_EQ(flipped.refused, 1u);
  // Fixed on the odd shape: taken with the heuristic's bits, refused without.
  const cuda::ClusterChoice fixed{cuda::ClusterChoice::kFixed};
  const OddCluster::Chosen fixed_same = g.choose(fixed, control.odd, false);
  const OddCluster::Chosen fixed_other = g.choose(fixed, control.odd, true);
  EXPECT_EQ(fixed_same.kept, control.odd);
  EXPECT_EQ(fixed_same.refused, 0u);
  EXPECT_EQ(fixed_other.kept, control.heuristic);
  EXPECT_EQ(fixed_other.refused, 1u);
}

// Why the own GEMM's tests skip here (no GPU, not compute capability 9.0), or
// nullptr where they run.
const char* own_sm90_skip() {
  if (!gputest::have_gpu()) return "no CUDA device";
  if (!cuda::fp8_gemm_sm90_supported(1024, 1024, 1024)) return "not a compute capability 9.0 device";
  return nullptr;
}
// A shape of the own GEMM's tests: d[M, N] from a[M, K] and W {N, K} (for the
// wgrad, M is the tokens).
struct Case {
  const char* name;
  int M, N, K;
};

// mxdp's own sm_90a GEMM (models/cuda/fp8_gemm_sm90.h) for fprop and dgrad,
// against the same references and bounds as cuBLASLt above, and against
// cuBLASLt's output on the same operands. The shapes add gpt2-1558m's (d_model
// 1600: a last K block and N tile of 64) and a token count that ends in a
// partial 128-row tile (M 1040), where TMA's zero fill and the row guards work.
TEST(GpuFp8Gemm, OwnSm90GemmAgainstFp32ReferencesAndCublasLt) {
  if (const char* why = own_sm90_skip()) GTEST_SKIP() << why;
  cuda::Fp8Gemm gemm(0);
  uint32_t seed = 101;
  for (const Case& c : {Case{"124m attn.qkv", 1024, 2304, 768}, Case{"124m mlp.proj", 1024, 768, 3072},
                        Case{"774m mlp.fc", 1024, 5120, 1280}, Case{"1558m attn.qkv", 1024, 4800, 1600},
                        Case{"1558m mlp.proj", 1040, 1600, 6400}, Case{"small", 48, 80, 144}}) {
    SCOPED_TRACE(c.name);
    const int M = c.M, N = c.N, K = c.K;
    const auto hx = input(M, K, 1.0f, seed), hw = input(N, K, 0.02f, seed + 1);
    seed += 3;
    Dev<float> x(hx), w(hw);
    Act qx(x, M, K, false);
    Tiles qw(N, K);
    cuda::fp8b128_quantize(w.p, N, K, qw.q.p, qw.s.p, 0);
    qw.finish(N, K);
    Dev<uint16_t> y(size_t(M) * N), y2(size_t(M) * N), yl(size_t(M) * N);
    cuda::fp8_gemm_nt_sm90(qx.op(), qw.op(), M, N, K, nullptr, y.p, 0);
    cuda::fp8_gemm_nt_sm90(qx.op(), qw.op(), M, N, K, nullptr, y2.p, 0, /*cluster=*/1, /*persistent=*/false);
    Dev<uint16_t> y3(size_t(M) * N), y4(size_t(M) * N), y5(size_t(M) * N);
    cuda::fp8_gemm_nt_sm90(qx.op(), qw.op(), M, N, K, nullptr, y3.p, 0, /*cluster=*/2, /*persistent=*/false);
    cuda::fp8_gemm_nt_sm90(qx.op(), qw.op(), M, N, K, nullptr, y4.p, 0, /*cluster=*/1, /*persistent=*/true);
    cuda::fp8_gemm_nt_sm90(qx.op(), qw.op(), M, N, K, nullptr, y5.p, 0, /*cluster=*/4, /*persistent=*/true);
    gemm.nt(qx.op(), qw.op(), M, N, K, yl.p);
    const auto hy = y.get(), hl = yl.get();
    EXPECT_EQ(hy, y2.get()) << "cluster 1, a CTA a tile: not the same bits";
    EXPECT_EQ(hy, y3.get()) << "cluster 2, a cluster a tile pair: not the same bits";
    EXPECT_EQ(hy, y4.get()) << "cluster 1, persistent: not the same bits";
    EXPECT_EQ(hy, y5.get()) << "cluster 2 x 2, persistent: not the same bits";
    const Err e = error_of([&](size_t i) { return double(bf16(hy[i])); }, reference(qx.y, qw.y, M, N, K));
    const Err f = error_of([&](size_t i) { return double(bf16(hy[i])); }, reference(x, w, M, N, K));
    std::vector<double> lt(hl.size());
    for (size_t i = 0; i < hl.size(); ++i) lt[i] = bf16(hl[i]);
    const Err l = error_of([&](size_t i) { return double(bf16(hy[i])); }, lt);
    expect_own_errors("own sm90", c.name, M, N, K, e, f, l, 5e-3);
    // With a bias (N(0, 1) in bf16, so that it is as large as the product).
    std::vector<uint16_t> hb(N);
    std::mt19937 g(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& v : hb) {
      const float f = nd(g);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      v = uint16_t(u >> 16);
    }
    Dev<uint16_t> bias(hb), yb(size_t(M) * N);
    cuda::fp8_gemm_nt_sm90(qx.op(), qw.op(), M, N, K, bias.p, yb.p, 0);
    auto want = reference(qx.y, qw.y, M, N, K);
    for (size_t i = 0; i < want.size(); ++i) want[i] += bf16(hb[i % N]);
    const auto hyb = yb.get();
    const Err be = error_of([&](size_t i) { return double(bf16(hyb[i])); }, want);
    EXPECT_LE(be.frob, 5e-3) << "with a bias";
    EXPECT_LE(be.max_elem, 1e-2) << "with a bias";
  }
}

// The own GEMM's weight-gradient form (fp8_gemm_nt_accumulate_sm90): dW[N,K] +=
// dY^T X over the tokens, both operands 1x128 along the tokens, into an fp32
// gradient holding 1.0; the bounds of LinearLayerGemmsAgainstFp32References'
// wgrad, and against cuBLASLt's accumulate on the same operands. Token counts
// that end in a partial 128-deep block (1040) and an N below one tile.
TEST(GpuFp8Gemm, OwnSm90WgradAgainstFp32ReferencesAndCublasLt) {
  if (const char* why = own_sm90_skip()) GTEST_SKIP() << why;
  cuda::Fp8Gemm gemm(0);
  uint32_t seed = 301;
  for (const Case& c : {Case{"124m attn.qkv", 1024, 2304, 768}, Case{"1558m mlp.proj", 1040, 1600, 6400},
                        Case{"small", 144, 48, 80}}) {
    SCOPED_TRACE(c.name);
    const int M = c.M, N = c.N, K = c.K;
    const auto hx = input(M, K, 1.0f, seed), hdy = input(M, N, 1e-3f, seed + 2);
    seed += 3;
    Dev<float> x(hx), dy(hdy), xt(transpose(hx, M, K)), dyt(transpose(hdy, M, N));
    Act qxt(x, K, M, true), qdyt(dy, N, M, true);
    Dev<float> dw(std::vector<float>(size_t(N) * K, 1.0f)), dw2(std::vector<float>(size_t(N) * K, 1.0f)),
        dw4(std::vector<float>(size_t(N) * K, 1.0f)), lt(std::vector<float>(size_t(N) * K, 1.0f));
    cuda::fp8_gemm_nt_accumulate_sm90(qdyt.op(), qxt.op(), N, K, M, dw.p, 0);
    cuda::fp8_gemm_nt_accumulate_sm90(qdyt.op(), qxt.op(), N, K, M, dw2.p, 0, /*cluster=*/2, /*persistent=*/false);
    cuda::fp8_gemm_nt_accumulate_sm90(qdyt.op(), qxt.op(), N, K, M, dw4.p, 0, /*cluster=*/4, /*persistent=*/true);
    gemm.wgrad(qdyt.op(), qxt.op(), M, N, K, lt.p);
    const auto hdw = dw.get(), hlt = lt.get();
    EXPECT_EQ(hdw, dw2.get()) << "cluster 2, a cluster a tile pair: not the same bits";
    EXPECT_EQ(hdw, dw4.get()) << "cluster 2 x 2, persistent: not the same bits";
    const Err e = error_of([&](size_t i) { return double(hdw[i]) - 1.0; }, reference(qdyt.y, qxt.y, N, K, M));
    const Err f = error_of([&](size_t i) { return double(hdw[i]) - 1.0; }, reference(dyt, xt, N, K, M));
    std::vector<double> want_lt(hlt.size());
    for (size_t i = 0; i < hlt.size(); ++i) want_lt[i] = double(hlt[i]) - 1.0;
    const Err l = error_of([&](size_t i) { return double(hdw[i]) - 1.0; }, want_lt);
    expect_own_errors("own sm90 wgrad (M: tokens)", c.name, M, N, K, e, f, l, 1e-3);
  }
}

// What Fp8Linear sends to cuBLASLt because fp8_gemm_sm90_supported says no, the
// own GEMM's entry points refuse with an error that names the shape: M, N or K
// not multiples of 16, and for the fused epilogue an M not a multiple of 128.
TEST(GpuFp8Gemm, OwnSm90BadShapesAreErrors) {
  if (const char* why = own_sm90_skip()) GTEST_SKIP() << why;
  Dev<uint8_t> q(256 * 256), rq(256 * 256), cq(256 * 256);
  Dev<float> s(256 * 4), dw(256 * 256), rs(256 * 2), cs(2 * 256);
  Dev<uint16_t> d(256 * 256), bias(256);
  const Fp8Operand a{q.p, s.p, Fp8Kind::E4M3, Fp8Scaling::Rows1x128}, t{q.p, s.p, Fp8Kind::E4M3, Fp8Scaling::Tiles128};
  EXPECT_FALSE(cuda::fp8_gemm_sm90_supported(100, 256, 256));
  EXPECT_THROW(cuda::fp8_gemm_nt_sm90(a, t, 100, 256, 256, nullptr, d.p, 0), Error);  // M not a multiple of 16
  EXPECT_THROW(cuda::fp8_gemm_nt_sm90(a, t, 256, 256, 120, nullptr, d.p, 0), Error);  // K not a multiple of 16
  EXPECT_THROW(cuda::fp8_gemm_nt_accumulate_sm90(a, a, 256, 200, 256, dw.p, 0), Error);  // N not a multiple of 16
  EXPECT_THROW(cuda::fp8_gemm_gelu_quant_sm90(a, t, 144, 256, 256, bias.p, {d.p, rq.p, rs.p, cq.p, cs.p}, 0),
               Error);  // M not a multiple of 128
  try {
    cuda::fp8_gemm_nt_sm90(a, t, 256, 200, 256, nullptr, d.p, 0);
    ADD_FAILURE() << "N = 200 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shape 256 x 200 x 256"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mxdp

namespace mxdp {
namespace {

// fc's fused forward (fp8_gemm_gelu_quant_sm90: bias, GELU and both FP8
// operands of the GELU in the own GEMM's epilogue) against the two passes it
// replaces, fp8_gemm_nt_sm90 with the bias then act_quantize (GELU + rows +
// cols, the kernel the model otherwise runs), bit for bit: the pre-activation,
// the rows operand's codes and scales, the cols operand's. The pre-activation
// also against cuBLASLt's BIAS epilogue (the model's default route). Shapes:
// 124M and 1558M fc, and an N ending in a partial tile (208 = 128 + 80) with K
// ending in a partial block; each way of running it.
TEST(GpuFp8Gemm, OwnSm90GeluQuantIsGemmThenActQuantize) {
  if (const char* why = own_sm90_skip()) GTEST_SKIP() << why;
  uint32_t seed = 401;
  for (const Case& c : {Case{"124m mlp.fc", 1024, 3072, 768}, Case{"1558m mlp.fc", 1024, 6400, 1600},
                        Case{"small", 256, 208, 144}}) {
    SCOPED_TRACE(c.name);
    const int M = c.M, N = c.N, K = c.K;
    const auto hx = input(M, K, 1.0f, seed), hw = input(N, K, 0.02f, seed + 1);
    std::mt19937 g(seed + 2);
    seed += 3;
    std::normal_distribution<float> nd(0.f, 0.5f);
    std::vector<uint16_t> hb(N);
    for (auto& v : hb) v = codec::bf16_from_f32(nd(g));
    Dev<float> x(hx), w(hw);
    Dev<uint16_t> bias(hb);
    Act qx(x, M, K, false);
    Tiles qw(N, K);
    cuda::fp8b128_quantize(w.p, N, K, qw.q.p, qw.s.p, 0);
    qw.finish(N, K);
    const size_t rows_scales = size_t(fp8_1x128_scale_count(M, N)), cols_scales = size_t(M / 128) * N;
    struct Out {
      Dev<uint16_t> pre;
      Dev<uint8_t> rq, cq;
      Dev<float> rs, cs;
      Out(size_t mn, size_t rsn, size_t csn) : pre(mn), rq(mn), cq(mn), rs(rsn), cs(csn) {}
    };
    const size_t mn = size_t(M) * N;
    // The two passes.
    Out want(mn, rows_scales, cols_scales);
    cuda::fp8_gemm_nt_sm90(qx.op(), qw.op(), M, N, K, bias.p, want.pre.p, 0);
    const std::vector<uint16_t> pre = want.pre.get();
    cuda::act_quantize({.x = want.pre.p,
                        .op = cuda::ActOp::Gelu,
                        .rows = {want.rq.p, want.rs.p},
                        .cols = {want.cq.p, want.cs.p}},
                       M, N, 0);
    EXPECT_EQ(want.pre.get(), pre) << "act_quantize wrote over the pre-activation it only reads";
    const std::vector<uint8_t> rq = want.rq.get(), cq = want.cq.get();
    const std::vector<float> rs = want.rs.get(), cs = want.cs.get();
    {  // The model's default route: cuBLASLt's BIAS epilogue, the same pre-activation.
      Dev<uint16_t> lt(mn);
      cuda::Fp8Gemm gemm(0);
      ASSERT_TRUE(gemm.nt_bias(qx.op(), qw.op(), M, N, K, bias.p, lt.p)) << "cuBLASLt has no bias epilogue here";
      MXDP_CUDA_CHECK(cudaDeviceSynchronize());
      EXPECT_EQ(lt.get(), pre) << "cuBLASLt's bias epilogue and the own GEMM's";
    }
    size_t nonzero = 0;
    for (uint8_t v : rq) nonzero += (v & 0x7F) != 0;
    EXPECT_GT(nonzero, mn / 2) << "the rows operand is mostly zero codes";
    for (const int variant : {2, 1, 4, -1, -2}) {  // cluster size; negative: a cluster a tile group
      SCOPED_TRACE(variant);
      Out got(mn, rows_scales, cols_scales);
      cuda::fp8_gemm_gelu_quant_sm90(qx.op(), qw.op(), M, N, K, bias.p,
                                     {got.pre.p, got.rq.p, got.rs.p, got.cq.p, got.cs.p}, 0, std::abs(variant),
                                     variant > 0);
      EXPECT_EQ(got.pre.get(), pre) << "the pre-activation";
      EXPECT_EQ(got.rq.get(), rq) << "the rows operand's codes";
      EXPECT_EQ(got.rs.get(), rs) << "the rows operand's scales";
      EXPECT_EQ(got.cq.get(), cq) << "the cols operand's codes";
      EXPECT_EQ(got.cs.get(), cs) << "the cols operand's scales";
    }
    std::printf("own sm90 gelu+quant %-13s M %5d N %5d K %5d | same bits as GEMM + act_quantize: %s\n", c.name, M,
                N, K, ::testing::Test::HasFailure() ? "NO" : "yes");
  }
}

}  // namespace
}  // namespace mxdp
