// The data-parallel engine on GPUs: NCCL communicator, CUDA EngineOps, and a
// model whose weights and gradients live in device memory. The lifecycle
// sequences of mpitest_lifecycle.cpp run on it, and the parity contract must
// hold there too: sharded + low-precision gather BITWISE equal to the reference
// mode on the same GPUs, and every read of the device weights equal to the
// oracle's quantize-then-dequantize of the masters (oracle.h). Against the CPU engine the losses agree within
// rounding (the device's grad-norm reduction tree differs, which moves the clip
// coefficient by an ulp or so).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>

#include "engine/cuda/engine_ops_cuda.h"
#include "models/gpt2/cuda/gpt_cuda.h"
#include "models/llama/cuda/llama_cuda.h"
#include "formats/codec.h"
#include "util/cuda_check.h"
#include "lifecycle.h"

using namespace mxdp;
using namespace mxdp::testing;

namespace {

int gpu_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}
int ranks_on_host() {
  const char* s = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  return s ? std::atoi(s) : 1;
}
std::string skip_reason() {
  const int g = gpu_count();
  if (g == 0) return "no GPU";
  if (ranks_on_host() > g) return std::to_string(ranks_on_host()) + " ranks on this host but " + std::to_string(g) + " GPUs";
  return "";
}

// ToyModel computing on the host, its weights and gradients in device memory:
// what the engine sees is exactly a GPU model (device pointers everywhere).
class DeviceToy final : public Model {
 public:
  DeviceToy() {
    for (const auto& p : host_.params()) {
      float* d = nullptr;
      MXDP_CUDA_CHECK(cudaMalloc(&d, p.numel() * sizeof(float)));
      dev_.push_back(d);
    }
  }
  ~DeviceToy() override {
    for (float* d : dev_) cudaFree(d);
  }
  const std::vector<ParamSpec>& params() const override { return host_.params(); }
  int num_layers() const override { return host_.num_layers(); }
  float* weights(int p) override { return dev_[p]; }
  void init_weights(uint64_t seed) override {
    host_.init_weights(seed);
    for (size_t p = 0; p < dev_.size(); ++p) upload(dev_[p], host_.weights(int(p)), numel(int(p)));
  }
  float forward(const Batch& b, ModelHooks& hooks) override {
    Proxy px(*this, hooks);
    return host_.forward(b, px);
  }
  void forward_into(const Batch& b, ModelHooks& hooks, float* loss) override {  // loss: device memory
    const float l = forward(b, hooks);
    upload(loss, &l, 1);
  }
  void backward(ModelHooks& hooks) override {
    Proxy px(*this, hooks);
    host_.backward(px);
  }
  std::vector<float> read(int p) {
    std::vector<float> h(numel(p));
    MXDP_CUDA_CHECK(cudaDeviceSynchronize());
    MXDP_CUDA_CHECK(cudaMemcpy(h.data(), dev_[p], h.size() * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  int64_t numel(int p) const { return host_.params()[p].numel(); }
  static void upload(float* d, const float* h, int64_t n) {
    MXDP_CUDA_CHECK(cudaDeviceSynchronize());
    MXDP_CUDA_CHECK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
  }
  // Between the host model and the engine: weights come down after the engine
  // made them fresh; gradients go up when a layer's are complete.
  struct Proxy final : ModelHooks {
    DeviceToy& m;
    ModelHooks& in;
    std::map<int, std::vector<float>> grads;
    Proxy(DeviceToy& mm, ModelHooks& h) : m(mm), in(h) {}
    void before_layer(int layer) override {
      in.before_layer(layer);
      for (size_t p = 0; p < m.dev_.size(); ++p)
        if (m.host_.params()[p].layer == layer) {
          auto w = m.read(int(p));
          std::copy(w.begin(), w.end(), m.host_.weights(int(p)));
        }
    }
    float* grad(int p) override {
      auto it = grads.find(p);
      if (it == grads.end()) {  // accumulate onto what the engine holds
        std::vector<float> h(m.numel(p));
        MXDP_CUDA_CHECK(cudaDeviceSynchronize());
        MXDP_CUDA_CHECK(cudaMemcpy(h.data(), in.grad(p), h.size() * sizeof(float), cudaMemcpyDeviceToHost));
        it = grads.emplace(p, std::move(h)).first;
      }
      return it->second.data();
    }
    void after_layer_backward(int layer) override {
      for (auto& [p, h] : grads)
        if (m.host_.params()[p].layer == layer) upload(in.grad(p), h.data(), int64_t(h.size()));
      in.after_layer_backward(layer);
    }
  };
  ToyModel host_;
  std::vector<float*> dev_;
};

struct Gpu {
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<EngineOps> ops;
};
Gpu& gpu() {
  static Gpu g = [] {
    Gpu g;
    Communicator::Options o;
    o.backend = Backend::Nccl;
    o.timeout_s = 120;
    g.comm = make_communicator(o);  // chooses this rank's device
    g.ops = cuda::make_cuda_ops();
    return g;
  }();
  return g;
}
Communicator& cpu_world() {
  static std::unique_ptr<Communicator> c = make_communicator();
  return *c;
}

std::string scratch() {
  static std::string dir = [] {
    char buf[256] = {};
    on_rank0(cpu_world(), [&] {  // an error on rank 0 reaches every rank
      std::string t = (std::filesystem::temp_directory_path() / "mxdp_gpu_engine_XXXXXX").string();
      MXDP_CHECK(::mkdtemp(t.data()), "mkdtemp failed for ", t);
      std::snprintf(buf, sizeof buf, "%s", t.c_str());
    });
    cpu_world().broadcast(buf, sizeof buf, 0);
    return std::string(buf);
  }();
  return dir;
}

Runner gpu_runner(const DpOptions& o, const std::string& ckpt) {
  Runner r{*gpu().comm, o, ckpt, ckpt};
  r.engine_ops = gpu().ops.get();
  r.make_model = [] { return std::make_unique<DeviceToy>(); };
  r.read_compute = [](Model& m, int p) {
    const std::vector<float> w = static_cast<DeviceToy&>(m).read(p);
    std::vector<uint8_t> b(w.size() * sizeof(float));
    if (!w.empty()) std::memcpy(b.data(), w.data(), b.size());
    return b;
  };
  r.control = &cpu_world();  // failures are agreed over MPI (NCCL needs device buffers)
  return r;
}

struct SkipMarker : ::testing::Environment {
  void SetUp() override {
    const std::string why = skip_reason();
    if (!why.empty()) std::printf("mxdp-gpu-tests-skipped: %s\n", why.c_str());
  }
};
const auto* const kSkipMarker = ::testing::AddGlobalTestEnvironment(new SkipMarker);

}  // namespace

TEST(GpuEngine, LifecycleBitwiseEqualToReference) {
  const std::string why = skip_reason();
  if (!why.empty()) GTEST_SKIP() << why;
  for (const Config& cfg : configs())
    for (const Sequence& s : sequences()) {
      // The test model has no FP8 compute; the GPT's and the Llama's FP8 lifecycles are their own tests below.
      if (cfg.opt.compute_dtype == LinearCompute::Fp8) continue;
      const DpOptions o = for_sequence(cfg.opt, s);
      const std::string key = cfg.name + "/" + s.name;
      const std::string base = scratch() + "/" + cfg.name;
      Runner dr = gpu_runner(o, base + "-dist.ckpt"), rr = gpu_runner(o.reference(), base + "-ref.ckpt");
      dr.seed = rr.seed = s.seed;
      SequenceResult dist = dr.run(s.ops);
      SequenceResult ref = rr.run(s.ops);
      // Parity, and the oracle (oracle.h) on every read of the device weights in both modes.
      EXPECT_EQ(compare(dist, ref), "") << "GPU dp=" << gpu().comm->size() << " " << key;
      const int64_t want = expected_oracle_checks(s.ops, s.micro_batches, 7);
      EXPECT_EQ(dist.oracle_checks, want) << key << ": reads the oracle did not see";
      EXPECT_EQ(ref.oracle_checks, want) << key << " (reference): reads the oracle did not see";
      // The CPU engine (MPI, CPU ops) on the same sequence: equal within rounding.
      Runner cpu{cpu_world(), o, base + "-cpu.ckpt", base + "-cpu.ckpt"};
      cpu.make_model = [] { return std::make_unique<ToyModel>(); };  // DeviceToy's host twin, whatever the format
      cpu.seed = s.seed;
      SequenceResult c = cpu.run(s.ops);
      ASSERT_EQ(c.error, "") << key;
      ASSERT_EQ(c.oracle, "") << key;
      ASSERT_EQ(c.losses.size(), dist.losses.size()) << key;
      for (size_t i = 0; i < c.losses.size(); ++i)
        EXPECT_NEAR(dist.losses[i], c.losses[i], 1e-5 * std::abs(c.losses[i])) << key << " " << dist.tags[i];
    }
}

// The optimizer step makes no host wait: the grad norm, the clip coefficient,
// the skip decision and the AdamW count are made on the device
// (step_control) and read there by the fused AdamW passes; the results (with
// each rank's loss folded into the partial sums' all-gather) come back behind
// the step's work and are read later (take_result). Everything else
// (reduce-scatter, micro-batch scaling, the NVFP4 amax all-reduce, the gathers)
// stays on the device stream too. Counted by the CUDA ops (every stream
// synchronisation they make), for each format, overlap on and off, clipped
// steps, at every dp this test runs; the results read late are those of the
// same steps read at once.
TEST(GpuEngine, OptimizerStepMakesNoHostWait) {
  const std::string why = skip_reason();
  if (!why.empty()) GTEST_SKIP() << why;
  const int rank = gpu().comm->rank();
  int checked = 0;
  for (const Config& cfg : configs()) {
    if (cfg.opt.mxfp8_scale_rounding == ScaleRounding::Floor) continue;
    if (cfg.opt.compute_dtype == LinearCompute::Fp8) continue;  // no GPU FP8 compute path yet
    for (const DpOptions& o : {cfg.opt, cfg.opt.reference()}) {
      DpOptions opt = o;
      opt.clip_grad = 1e-3;  // every step clipped
      DeviceToy m;
      m.init_weights(2);
      std::vector<double> late, now;
      {
        DataParallel dp(m, *gpu().comm, opt, gpu().ops.get());
        for (int s = 0; s < 4; ++s) {
          dp.forward_backward(make_batch(s, 0, rank, false).batch);
          const int64_t before = gpu().ops->host_waits();
          dp.launch_step();
          const int64_t waits = gpu().ops->host_waits() - before;
          EXPECT_EQ(waits, 0) << cfg.name << (o.distributed_optimizer ? "" : " (reference)") << " step " << s + 1;
        }
        while (auto r = dp.take_result(true)) {
          EXPECT_FALSE(r->skipped);
          late.push_back(r->loss);
        }
      }
      DeviceToy m2;
      m2.init_weights(2);
      DataParallel dp(m2, *gpu().comm, opt, gpu().ops.get());
      for (int s = 0; s < 4; ++s) now.push_back(dp.train_step({make_batch(s, 0, rank, false).batch}).loss);
      ASSERT_EQ(late.size(), now.size());
      for (size_t i = 0; i < now.size(); ++i) EXPECT_TRUE(same_bits(late[i], now[i])) << cfg.name << " step " << i + 1;
      ++checked;
    }
  }
  // bf16 x2, mxfp8 x4 (reuse), nvfp4 x2 (overlap), fp8b128 x2 (bf16 compute; mxfp8-floor and FP8
  // compute left out), both modes.
  EXPECT_EQ(checked, 10 * 2);
}

// The GPU GPT through the engine: bf16 compute weights written by the unpack
// kernels, gradients accumulated by cuBLASLt and the model's kernels into the
// engine's grad buffer. Lifecycle sequences a to e, bitwise equal to reference
// mode, for bf16, mxfp8 (with and without grad-buffer reuse) and nvfp4 with
// overlap on; and two identical runs bitwise equal.
GptConfig lifecycle_gpt(WeightFormat f) {
  // make_batch draws tokens below 64, sequences of 8. fp8b128: d_model 192,
  // so that wte (128 x 192) and every block weight end in partial 128x128
  // tiles (gpt2-1558m's case; whole tiles are the first slabs of each).
  if (f == WeightFormat::Fp8b128)
    return {.vocab = 64, .padded_vocab = 128, .max_seq = 16, .n_layer = 2, .n_head = 3, .d_model = 192};
  return {.vocab = 64, .padded_vocab = 64, .max_seq = 16, .n_layer = 2, .n_head = 2, .d_model = 64};
}
Runner gpt_runner(const DpOptions& o, const std::string& ckpt) {
  Runner r{*gpu().comm, o, ckpt, ckpt};
  r.engine_ops = gpu().ops.get();
  r.make_model = [f = o.weight_format] {
    return cuda::make_gpt(lifecycle_gpt(f), static_cast<cudaStream_t>(gpu().ops->stream()));
  };
  r.read_compute = [](Model& m, int p) {  // bf16 bytes, held to the oracle
    std::vector<uint8_t> b(m.params()[p].numel() * 2);
    MXDP_CUDA_CHECK(cudaDeviceSynchronize());
    MXDP_CUDA_CHECK(cudaMemcpy(b.data(), m.compute_weights(p), b.size(), cudaMemcpyDeviceToHost));
    return b;
  };
  r.control = &cpu_world();
  return r;
}

TEST(GpuEngine, GptLifecycleBitwiseEqualToReference) {
  const std::string why = skip_reason();
  if (!why.empty()) GTEST_SKIP() << why;
  int compared = 0;
  for (const Config& cfg : configs()) {
    if (!cfg.opt.overlap_param_gather || cfg.opt.mxfp8_scale_rounding == ScaleRounding::Floor) continue;
    if (cfg.opt.compute_dtype == LinearCompute::Fp8) continue;  // no GPU FP8 compute path yet
    for (const Sequence& s : sequences()) {
      if (s.name[0] > 'e') continue;
      DpOptions o = for_sequence(cfg.opt, s);
      o.bucket_size = 20000;
      const std::string key = cfg.name + "/" + s.name;
      const std::string base = scratch() + "/gpt-" + cfg.name;
      SequenceResult dist = gpt_runner(o, base + "-dist.ckpt").run(s.ops);
      SequenceResult ref = gpt_runner(o.reference(), base + "-ref.ckpt").run(s.ops);
      EXPECT_EQ(compare(dist, ref), "") << "GPU GPT dp=" << gpu().comm->size() << " " << key;
      if (s.name[0] == 'a') {
        SequenceResult again = gpt_runner(o, base + "-again.ckpt").run(s.ops);
        EXPECT_EQ(compare(again, dist), "") << "two identical GPU GPT runs " << key;
      }
      ++compared;
    }
  }
  EXPECT_EQ(compared, 5 * 6);  // bf16, mxfp8, mxfp8+reuse, nvfp4, fp8b128 (overlap on) x sequences a..e
}

// A GPU model in FP8 compute (docs/fp8.md) through the lifecycle sequences a
// to e with fp8b128 + FP8 compute (overlap on), its first block in FP8 and in
// bf16 (--num-layers-at-start-in-bf16 1): sharded bitwise equal to reference
// mode, two identical runs (sequence a) bitwise equal, no error, and every W
// and W^T the model reads held to the oracle bit for bit (copied back from the
// device), some FP8 reads among the reads. `make` builds the model for a
// weight format. Returns the sequences compared.
int run_fp8_lifecycles(const std::string& name, const std::function<std::unique_ptr<Model>(WeightFormat)>& make) {
  int compared = 0;
  for (const Config& cfg : configs()) {
    if (cfg.opt.compute_dtype != LinearCompute::Fp8 || !cfg.opt.overlap_param_gather) continue;
    for (int bf16_first : {0, 1})  // 1: block 0 in bf16, block 1 in FP8
    for (const Sequence& s : sequences()) {
      if (s.name[0] > 'e') continue;
      DpOptions o = for_sequence(cfg.opt, s);
      o.bucket_size = 20000;
      o.num_layers_at_start_in_bf16 = bf16_first;
      const std::string key = name + " FP8 " + cfg.name + "/" + s.name + (bf16_first ? " first block bf16" : "");
      const std::string base = scratch() + "/" + name + "-fp8-" + cfg.name + (bf16_first ? "-b" : "");
      auto runner = [&](const DpOptions& opt, const std::string& ckpt) {
        Runner r = gpt_runner(opt, ckpt);
        r.make_model = [&make, f = opt.weight_format] { return make(f); };
        r.own_fp8 = true;
        r.copy_out = [](void* d, const void* src, size_t n) {
          MXDP_CUDA_CHECK(cudaDeviceSynchronize());
          MXDP_CUDA_CHECK(cudaMemcpy(d, src, n, cudaMemcpyDeviceToHost));
        };
        return r;
      };
      SequenceResult dist = runner(o, base + "-dist.ckpt").run(s.ops);
      SequenceResult ref = runner(o.reference(), base + "-ref.ckpt").run(s.ops);
      EXPECT_EQ(dist.error, "") << key;
      EXPECT_EQ(dist.oracle, "") << key;
      EXPECT_GT(dist.fp8_checks, 0) << key << ": no FP8 weight read reached the oracle";
      EXPECT_EQ(compare(dist, ref), "") << key << ", dp=" << gpu().comm->size();
      if (s.name[0] == 'a') {
        SequenceResult again = runner(o, base + "-again.ckpt").run(s.ops);
        EXPECT_EQ(compare(again, dist), "") << "two identical runs, " << key;
      }
      ++compared;
    }
  }
  return compared;
}

// The GPU GPT: its four block linears read the engine's W and W^T through
// cuda::Fp8Linear (d_model 192: every weight ends in a partial 128x128 tile).
TEST(GpuEngine, GptFp8ComputeLifecycleBitwiseEqualToReference) {
  const std::string why = skip_reason();
  if (!why.empty()) GTEST_SKIP() << why;
  const int compared = run_fp8_lifecycles("gpt", [](WeightFormat f) -> std::unique_ptr<Model> {
    return cuda::make_gpt(lifecycle_gpt(f), static_cast<cudaStream_t>(gpu().ops->stream()));
  });
  EXPECT_EQ(compared, 12);  // fp8b128+fp8+overlap x the 6 sequences a..e (as the bf16 test above) x first block FP8 / bf16
}

// The GPU Llama, as the GPT: a Llama 3-style model with GQA (4 query heads, 2
// KV heads of 32), d_model 192 and d_ff 320 (partial tiles) and an untied head.
TEST(GpuEngine, LlamaFp8ComputeLifecycleBitwiseEqualToReference) {
  const std::string why = skip_reason();
  if (!why.empty()) GTEST_SKIP() << why;
  LlamaConfig lc;
  lc.vocab = 64, lc.max_seq = 16, lc.n_layer = 2, lc.n_head = 4, lc.n_kv_head = 2, lc.head_dim = 32;
  lc.d_model = 192, lc.d_ff = 320, lc.tie_embeddings = false;
  const int compared = run_fp8_lifecycles("llama", [lc](WeightFormat) -> std::unique_ptr<Model> {
    return cuda::make_llama(lc, static_cast<cudaStream_t>(gpu().ops->stream()));
  });
  EXPECT_EQ(compared, 12);
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  cpu_world();
  int rc = RUN_ALL_TESTS();
  cpu_world().barrier();
  if (cpu_world().rank() == 0 && !scratch().empty()) std::filesystem::remove_all(scratch());
  return rc;
}
