// DataParallel on one rank (self communicator): the parts of the engine that
// the lifecycle matrix does not isolate — non-finite gradients, misuse errors,
// clipping, gradient accumulation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <regex>
#include <string>

#include "util/check.h"
#include "comm/comm.h"
#include "engine/engine.h"
#include "models/gpt2/gpt.h"
#include "models/llama/llama.h"
#include "models/registry.h"
#include "train/trainer.h"
#include "error_of.h"
#include "lifecycle.h"
#include "tmpdir_util.h"
#include "models/toy/toy_model.h"

using namespace mxdp;
using namespace mxdp::testing;

namespace {

// Wraps a model; on demand, poisons one gradient element with NaN or Inf.
class Poisoned final : public Model {
 public:
  explicit Poisoned(Model& m) : m_(m) {}
  const std::vector<ParamSpec>& params() const override { return m_.params(); }
  int num_layers() const override { return m_.num_layers(); }
  float* weights(int p) override { return m_.weights(p); }
  void init_weights(uint64_t s) override { m_.init_weights(s); }
  float forward(const Batch& b, ModelHooks& h) override { return m_.forward(b, h); }
  void forward_into(const Batch& b, ModelHooks& h, float* loss) override { m_.forward_into(b, h, loss); }
  void backward(ModelHooks& h) override {
    struct Tap : ModelHooks {
      ModelHooks& in;
      float poison;
      explicit Tap(ModelHooks& i, float p) : in(i), poison(p) {}
      void before_layer(int l) override { in.before_layer(l); }
      float* grad(int p) override { return in.grad(p); }
      void after_layer_backward(int l) override {
        if (l == 2 && poison != 0) in.grad(3)[5] += poison;  // mlp.down.w, layer 2
        in.after_layer_backward(l);
      }
    } tap(h, poison);
    m_.backward(tap);
  }
  float poison = 0;

 private:
  Model& m_;
};

std::unique_ptr<Communicator> self() { return make_communicator({Backend::Self}); }

}  // namespace

TEST(Engine, NonFiniteGradientsSkipTheStepAndKeepTheWeights) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    auto comm = self();
    ToyModel toy;
    toy.init_weights(3);
    Poisoned model(toy);
    DpOptions o;
    DataParallel dp(model, *comm, o);
    auto b0 = make_batch(0, 0, 0, false);
    StepResult r0 = dp.train_step({b0.batch});
    ASSERT_FALSE(r0.skipped);
    std::vector<std::vector<float>> before;
    for (int p = 0; p < 7; ++p) before.push_back(dp.full_master(p));
    model.poison = bad;
    StepResult r1 = dp.train_step({make_batch(1, 0, 0, false).batch});
    EXPECT_TRUE(r1.skipped);
    EXPECT_FALSE(std::isfinite(r1.grad_norm));
    EXPECT_EQ(r1.version, 1);
    EXPECT_EQ(dp.version(), 1) << "no update was applied";
    EXPECT_EQ(dp.iteration(), 2) << "the schedule's clock still advances";
    EXPECT_EQ(dp.skipped_steps(), 1);
    for (int p = 0; p < 7; ++p) EXPECT_TRUE(same_bits(dp.full_master(p), before[p])) << "param " << p << " moved";
    // Training goes on normally afterwards and uses the untouched weights.
    model.poison = 0;
    StepResult r2 = dp.train_step({make_batch(2, 0, 0, false).batch});
    EXPECT_FALSE(r2.skipped);
    EXPECT_EQ(dp.version(), 2);
    EXPECT_TRUE(std::isfinite(r2.loss));
  }
}

// The host launches step 3 before it has read whether step 2 was skipped (the
// skip is decided on the device): step 3's AdamW count must still be the right
// one. A run whose step 2 is poisoned, its results read late, ends with
// bitwise the masters of a run that never took step 2 (constant lr, so only the
// AdamW count could tell them apart), and its results are those of the same
// run read step by step.
TEST(Engine, AStepLaunchedBeforeTheSkipIsReadUsesTheRightAdamWCount) {
  auto run = [](bool pipelined, bool take_step2) {
    auto comm = self();
    ToyModel toy;
    toy.init_weights(3);
    Poisoned model(toy);
    DpOptions o;
    o.warmup_steps = 0;
    o.lr_decay_steps = 0;
    o.clip_grad = 0.5;
    DataParallel dp(model, *comm, o);
    std::vector<StepResult> rs;
    for (int s = 0; s < 5; ++s) {
      if (s == 1 && !take_step2) continue;
      model.poison = s == 1 ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
      dp.forward_backward(make_batch(s, 0, 0, false).batch);
      dp.launch_step();
      while (dp.results_pending() > (pipelined ? 1 : 0)) rs.push_back(*dp.take_result(true));
      if (pipelined) {
        EXPECT_LE(dp.results_pending(), 1);
      }
    }
    while (auto r = dp.take_result(true)) rs.push_back(*r);
    EXPECT_FALSE(dp.take_result(true).has_value());
    std::vector<std::vector<float>> w;
    for (int p = 0; p < 7; ++p) w.push_back(dp.full_master(p));
    EXPECT_EQ(dp.version(), 4) << "4 updates applied either way";
    return std::make_pair(rs, w);
  };
  const auto [late, wl] = run(true, true);
  const auto [now, wn] = run(false, true);
  const auto [never, wv] = run(false, false);
  ASSERT_EQ(late.size(), 5u);
  ASSERT_EQ(never.size(), 4u);
  EXPECT_TRUE(late[1].skipped);
  EXPECT_EQ(late[1].version, 1);
  EXPECT_EQ(late[4].version, 4);
  EXPECT_EQ(late[4].iteration, 5);
  for (size_t i = 0; i < late.size(); ++i) {
    EXPECT_TRUE(same_bits(late[i].loss, now[i].loss)) << i;
    EXPECT_TRUE(same_bits(late[i].grad_norm, now[i].grad_norm)) << i;
    EXPECT_EQ(late[i].skipped, now[i].skipped) << i;
    EXPECT_EQ(late[i].version, now[i].version) << i;
  }
  for (size_t i = 2; i < late.size(); ++i)
    EXPECT_TRUE(same_bits(late[i].loss, never[i - 1].loss)) << "step " << i + 1 << " vs the run without step 2";
  for (int p = 0; p < 7; ++p) {
    EXPECT_TRUE(same_bits(wl[p], wn[p])) << "param " << p;
    EXPECT_TRUE(same_bits(wl[p], wv[p])) << "param " << p << ": the skipped step changed the AdamW count";
  }
}

TEST(Engine, ClippingBoundsTheUpdate) {
  // Adam normalises the update, so a clipped first step looks like an unclipped
  // one; clipping shows from the second step on (the moments then mix clipped
  // and earlier gradients). The reported norm is the pre-clip norm in both runs.
  auto run = [](double clip) {
    auto comm = self();
    ToyModel m;
    m.init_weights(5);
    DpOptions o;
    o.clip_grad = clip;
    DataParallel dp(m, *comm, o);
    std::vector<StepResult> rs;
    for (int s = 0; s < 3; ++s) rs.push_back(dp.train_step({make_batch(s, 0, 0, false).batch}));
    return rs;
  };
  auto a = run(0.0), b = run(1e-3);
  EXPECT_EQ(a[0].grad_norm, b[0].grad_norm) << "the norm is measured before clipping";
  EXPECT_GT(a[0].grad_norm, 1e-3);
  EXPECT_NE(a[2].loss, b[2].loss) << "clipping changed nothing";
}

TEST(Engine, MicroBatchesAverageTheGradient) {
  // Two identical micro-batches must give (up to rounding) the update of one.
  auto run = [](int micro) {
    auto comm = self();
    ToyModel m;
    m.init_weights(8);
    DpOptions o;
    o.micro_batches = micro;
    DataParallel dp(m, *comm, o);
    auto d = make_batch(0, 0, 0, false);
    std::vector<Batch> mbs(micro, d.batch);
    StepResult r = dp.train_step(mbs);
    return std::make_pair(r, dp.full_master(1));
  };
  auto [r1, w1] = run(1);
  auto [r2, w2] = run(2);
  // Not bitwise: the second micro-batch's contributions are added onto the
  // first's one by one, a different rounding order than one backward.
  EXPECT_EQ(r1.loss, r2.loss);
  EXPECT_NEAR(r1.grad_norm, r2.grad_norm, 1e-6 * r1.grad_norm);
  ASSERT_EQ(w1.size(), w2.size());
  for (size_t i = 0; i < w1.size(); ++i) EXPECT_NEAR(w1[i], w2[i], 1e-6) << i;
  // Twice the batch in one micro-batch is not what two micro-batches mean:
  // without the 1/micro_batches factor the norm would double.
  EXPECT_LT(r2.grad_norm, 1.5 * r1.grad_norm);
}

TEST(Engine, MainGradsAreTheGradBufferAtDp1) {
  // One rank: the reduce-scatter would copy the grads, so the reduced grads the
  // optimizer reads are the grad buffer itself, except in a buffer whose grad
  // region also takes the gathered payload (MXFP8 with reuse). Whether they are
  // a copy or the buffer changes no bit.
  auto run = [](WeightFormat f, bool reuse, GradReduceDType rd, int64_t want_main_grad_elems) {
    auto comm = self();
    ToyModel m;
    m.init_weights(4);
    DpOptions o;
    o.weight_format = f;
    o.reuse_grad_buf = reuse;
    o.grad_reduce_dtype = rd;
    o.clip_grad = 0.05;  // clipped steps: the fused AdamW scales the grads
    DataParallel dp(m, *comm, o);
    std::vector<double> losses;
    for (int s = 0; s < 4; ++s) losses.push_back(dp.train_step({make_batch(s, 0, 0, false).batch}).loss);
    const MemoryPlan got = dp.allocated(), plan = plan_memory(m.params(), dp.layout(), o);
    EXPECT_EQ(got, plan);
    if (want_main_grad_elems < 0)
      for (const GatherBuffer& gb : dp.layout().buffers)
        if (gb.format == WeightFormat::Mxfp8) want_main_grad_elems = gb.numel;
    EXPECT_EQ(got.main_grad_bytes, 4 * want_main_grad_elems) << to_string(f) << (reuse ? " reuse" : "");
    if (rd == GradReduceDType::Fp32 && !reuse) {
      EXPECT_EQ(got.reduce_bytes, 0) << "no reduce-scatter onto itself";
    }
    std::vector<std::vector<float>> w;
    for (int p = 0; p < int(m.params().size()); ++p) w.push_back(dp.full_master(p));
    return std::make_pair(losses, w);
  };
  for (GradReduceDType rd : {GradReduceDType::Fp32, GradReduceDType::Bf16}) {
    auto aliased = run(WeightFormat::Mxfp8, false, rd, 0);
    auto copied = run(WeightFormat::Mxfp8, true, rd, -1);  // the MXFP8 buffer keeps its own main grads
    EXPECT_EQ(aliased.first, copied.first);
    for (size_t p = 0; p < aliased.second.size(); ++p)
      EXPECT_TRUE(same_bits(aliased.second[p], copied.second[p])) << "param " << p;
    run(WeightFormat::Bf16, false, rd, 0);
    run(WeightFormat::Nvfp4, false, rd, 0);
  }
}

// Weight decay reaches exactly the params that take it (ParamSpec::decay), in
// every buffer format: the stage runs a shard's decay runs in one fused pass
// (adamw_quantize_ranges), each run with its own AdamW scalars. After one step
// from the same weights and batch, a param without decay has bitwise the master
// of a run with weight_decay 0, and a param with it that master less
// lr * wd * p0 (decoupled decay, to rounding).
TEST(Engine, WeightDecayReachesExactlyTheParamsThatTakeIt) {
  const double lr = 1e-2, wd = 0.1;
  for (const FormatTraits& ft : all_formats()) {
    auto run = [&](double decay) {
      auto comm = self();
      ToyModel m;
      m.init_weights(4);
      DpOptions o;
      o.weight_format = ft.id;
      o.lr = lr;
      o.weight_decay = decay;
      o.bucket_size = 3000;  // several buckets, params cut across them
      DataParallel dp(m, *comm, o);
      std::vector<std::vector<float>> w0, w1;
      for (int p = 0; p < int(m.params().size()); ++p) w0.push_back(dp.full_master(p));
      dp.train_step({make_batch(0, 0, 0, false).batch});
      for (int p = 0; p < int(m.params().size()); ++p) w1.push_back(dp.full_master(p));
      return std::make_pair(w0, w1);
    };
    const auto [w0, with] = run(wd);
    const auto [w0b, without] = run(0.0);
    const ToyModel toy;
    const std::vector<ParamSpec>& specs = toy.params();
    int decayed = 0, kept = 0;
    for (size_t p = 0; p < specs.size(); ++p) {
      const std::string what = std::string(ft.name) + " " + specs[p].name;
      ASSERT_TRUE(same_bits(w0[p], w0b[p])) << what;
      if (!specs[p].decay) {
        EXPECT_TRUE(same_bits(with[p], without[p])) << what << ": decayed, but it takes no weight decay";
        ++kept;
        continue;
      }
      int64_t off = 0;
      for (size_t i = 0; i < w0[p].size(); ++i) {
        const double want = double(without[p][i]) - lr * wd * double(w0[p][i]);
        off += std::abs(double(with[p][i]) - want) > 1e-5 * std::abs(double(w0[p][i])) + 1e-9;
      }
      EXPECT_EQ(off, 0) << what << ": not decayed by lr * wd * p";
      ++decayed;
    }
    EXPECT_GT(decayed, 0);
    EXPECT_GT(kept, 0);
  }
}

TEST(Engine, MisuseIsAClearError) {
  auto comm = self();
  ToyModel m;
  m.init_weights(1);
  DpOptions o;
  o.micro_batches = 2;
  DataParallel dp(m, *comm, o);
  auto d = make_batch(0, 0, 0, false);
  EXPECT_THROW(dp.optimizer_step(), Error);               // no micro-batch yet
  EXPECT_THROW(dp.train_step({d.batch}), Error);          // 1 of 2 micro-batches
  dp.forward_backward(d.batch);
  EXPECT_THROW(dp.save_checkpoint("/tmp/x.ckpt", {}), Error);  // mid-step
  dp.forward_backward(d.batch);
  EXPECT_THROW(dp.forward_backward(d.batch), Error);      // a third one
  dp.optimizer_step();
  DpOptions bad;
  bad.weight_format = WeightFormat::Nvfp4;
  bad.reuse_grad_buf = true;
  try {
    DataParallel x(m, *comm, bad);
    FAIL() << "reuse_grad_buf with nvfp4 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs weight_format mxfp8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dp.load_checkpoint("/nonexistent/ckpt"), Error);
}

// Issue 21, item 8: a checkpoint of another model configuration is refused
// with both shapes in the message.
TEST(Engine, LoadOfAnotherShapeNamesBothShapes) {
  auto comm = self();
  TempDir tmp;
  ToyModel small(64, 32, 64), wide(64, 32, 96);
  small.init_weights(1);
  wide.init_weights(1);
  DataParallel a(small, *comm, DpOptions{});
  const std::string path = tmp / "small";
  a.save_checkpoint(path, {});
  DataParallel b(wide, *comm, DpOptions{});
  try {
    b.load_checkpoint(path);
    FAIL() << "a checkpoint of another shape was loaded";
  } catch (const Error& e) {
    // ToyModel's param 1 is mlp.up.w, {h, d}: [64, 32] saved, [96, 32] now.
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[64, 32] in the checkpoint"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[96, 32] in the model"), std::string::npos) << msg;
  }
}

TEST(Engine, Fp8ComputeNeedsFp8b128AndAModelThatReadsIt) {
  auto comm = self();
  ToyModel m(128, 128, 256);
  m.init_weights(1);
  DpOptions o;
  o.compute_dtype = LinearCompute::Fp8;
  o.weight_format = WeightFormat::Mxfp8;
  try {
    DataParallel x(m, *comm, o);
    FAIL() << "compute_dtype fp8 with mxfp8 was accepted";
  } catch (const Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("--compute-dtype fp8"), std::string::npos) << w;
    EXPECT_NE(w.find("--weight-format fp8b128"), std::string::npos) << w;
  }
  o.weight_format = WeightFormat::Fp8b128;
  try {
    DataParallel x(m, *comm, o);  // the toy computes with its own fp32 weights only
    FAIL() << "a model that never reads FP8 weights was given FP8 compute";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not compute with FP8 weights"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_compute_dtype("fp8"), LinearCompute::Fp8);
  EXPECT_THROW(parse_compute_dtype("fp16"), Error);
}

// check_fp8_compute (model.h), the one refusal of FP8 compute: linear weights
// that read FP8 must exist, each with both sides multiples of 16 (the FP8
// GEMMs' N and K; partial edge tiles are fine); the count is theirs.
TEST(Fp8Compute, NeedsLinearWeightsOfSixteenAlignedSides) {
  const auto spec = [](std::vector<int64_t> shape, bool fp8_linear) {
    return ParamSpec{"w" + shape_string(shape), shape, 0, true, fp8_linear};
  };
  const std::vector<ParamSpec> ok = {spec({384, 128}, true), spec({128, 512}, true), spec({4800, 1600}, true),
                                     spec({96, 48}, true), spec({50, 90}, false), spec({96}, false)};
  EXPECT_EQ(check_fp8_compute(ok), 4) << "params that do not read FP8 play no part";
  for (const std::vector<int64_t>& bad : {std::vector<int64_t>{128, 40}, {40, 128}, {128, 200}, {128}}) {
    const std::string e = error_of([&] { check_fp8_compute({spec({128, 128}, true), spec(bad, true)}); });
    EXPECT_TRUE(contains(e, "both sides of each linear weight a multiple of 16")) << e;
    EXPECT_TRUE(contains(e, "w" + shape_string(bad) + " is " + shape_string(bad))) << e;
    EXPECT_TRUE(contains(e, "--d-model and --n-head whose widths")) << e;
  }
  const std::string none = error_of([&] { check_fp8_compute({spec({128, 128}, false)}); });
  EXPECT_TRUE(contains(none, "does not compute with FP8 weights")) << none;
  // GPT-2: four linear weights a block, at d_model 128 and at 96 (partial tiles).
  GptConfig g = gpt_config("tiny");
  g.d_model = 128;
  g.n_layer = 3;
  EXPECT_EQ(check_fp8_compute(gpt_param_specs(g)), 12);
  g.d_model = 96;
  EXPECT_EQ(check_fp8_compute(gpt_param_specs(g)), 12);
  Gpt narrow(g);
  EXPECT_NO_THROW(narrow.set_fp8_compute({.on = true}));
  // Llama: qkv, o, gate_up and down a block (llama-tiny: 128 x 64, 64 x 64, 384 x 64, 64 x 192).
  const LlamaConfig l = llama_config("llama-tiny");
  EXPECT_EQ(check_fp8_compute(llama_param_specs(l)), 4 * l.n_layer);
  Llama llama(l);
  EXPECT_NO_THROW(llama.set_fp8_compute({.on = true}));
  EXPECT_TRUE(llama.reads_fp8_weights());
}

// train and plan refuse --compute-dtype fp8 with the same sentence: a Llama
// whose linear weights are not all multiples of 16 (d_model 32 in 16 heads of
// 2, 2 of them KV heads: qkv.w is 40 x 32). Every GPT-2 width fits.
TEST(Fp8Compute, TrainAndPlanRefuseInOneSentence) {
  TempDir d;
  std::string text;
  for (int i = 0; i < 200; ++i) text += "In the beginning " + std::to_string(i) + "\n";
  write_file(d / "c.txt", text);
  const auto error_line = [&](const std::string& args) {
    const RunResult r = run_mxdp(args, d / "out.txt");
    EXPECT_NE(r.exit_code, 0) << args << "\n" << r.output;
    const size_t at = r.output.find("error: ");
    return at == std::string::npos ? r.output : r.output.substr(at, r.output.find('\n', at) - at);
  };
  for (const std::string model : {"--model llama-tiny --d-model 32 --n-head 16"}) {
    const std::string plan = error_line("plan " + model + " --compute-dtype fp8");
    const std::string train = error_line("train " + model + " --compute-dtype fp8 --weight-format fp8b128 --steps 1 --eval-every 0 "
                                         "--sample-tokens 0 --threads 1 --data " + quote(d / "c.txt"));
    EXPECT_TRUE(contains(plan, "--compute-dtype fp8")) << plan;
    EXPECT_TRUE(contains(plan, "h0.qkv.w is [40, 32]")) << plan;
    EXPECT_EQ(train, plan) << model;
  }
}

// plan has no --weight-format (it shows every format): its --compute-dtype
// help must not send the user to one; train's does.
TEST(Fp8Compute, HelpSaysWhatFp8MeansToEachCommand) {
  TempDir d;
  const RunResult plan = run_mxdp("plan --help", d / "plan.txt"), train = run_mxdp("train --help", d / "train.txt");
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  ASSERT_EQ(train.exit_code, 0) << train.output;
  EXPECT_FALSE(contains(plan.output, "--weight-format")) << plan.output;
  EXPECT_TRUE(contains(plan.output, "adds the row of the fp8b128 gather with FP8 compute")) << plan.output;
  EXPECT_TRUE(contains(train.output, "needs --weight-format fp8b128")) << train.output;
  for (const RunResult* r : {&plan, &train})
    EXPECT_TRUE(contains(r->output, "fp8: GPT-2 and Llama, on the CPU and the GPU;")) << r->output;
}

TEST(MemoryPlan, Gpt2OnEightRanks) {
  // GPT-2 124M at dp 8, Megatron's default 40M-element buckets: the payload per
  // element is 2 bytes (bf16), 1 + 1/32 (mxfp8), 1/2 + 1/16 (nvfp4), plus the
  // 1-D params that always travel in bf16 and the padding.
  const auto params = gpt_param_specs(gpt_config("gpt2-124m"));
  auto plan = [&](WeightFormat f, bool dist, bool reuse) {
    DpOptions o;
    o.weight_format = f;
    o.distributed_optimizer = dist;
    o.overlap_param_gather = dist;
    o.reuse_grad_buf = reuse;
    o.bucket_size = 40'000'000;
    return plan_memory(params, Layout::build(params, f, o.bucket_size, 8), o);
  };
  const MemoryPlan ref = plan(WeightFormat::Bf16, false, false);
  const MemoryPlan bf16 = plan(WeightFormat::Bf16, true, false);
  const MemoryPlan mx = plan(WeightFormat::Mxfp8, true, false);
  const MemoryPlan mx_reuse = plan(WeightFormat::Mxfp8, true, true);
  const MemoryPlan nv = plan(WeightFormat::Nvfp4, true, false);
  const MemoryPlan fp8 = plan(WeightFormat::Fp8b128, true, false);
  EXPECT_EQ(ref.params, 124475904);
  // fp8b128: 1 byte an element and 4 per 16384 for the blocks' weights, 2
  // bytes for the embedding tables (wte, wpe) and the 1-D params; a bucket
  // pads no more than with shards of 128 * lcm(768, 3072) elements, 8 * 393216
  // at most.
  int64_t block_weights = 0;
  for (const ParamSpec& p : params)
    if (p.shape.size() == 2 && p.name != "wte" && p.name != "wpe") block_weights += p.numel();
  const double least = (block_weights + 2.0 * double(ref.params - block_weights)) / (2.0 * double(ref.params));
  EXPECT_GT(double(fp8.gather_bytes) / bf16.gather_bytes, least);
  EXPECT_LT(double(fp8.gather_bytes) / bf16.gather_bytes, least + 4.0 * 8 * 393216 / ref.params);
  EXPECT_EQ(fp8.fp8_weight_bytes, 0) << "bf16 compute: no FP8 W or W^T";
  EXPECT_LT(double(ref.laid_out) / ref.params, 1.01) << "padding stays small";
  EXPECT_NEAR(double(bf16.master_bytes + bf16.adam_bytes) / (ref.master_bytes + ref.adam_bytes), 1.0 / 8, 1e-3);
  EXPECT_NEAR(double(mx.gather_bytes) / bf16.gather_bytes, (1 + 1.0 / 32) / 2, 0.01);
  EXPECT_NEAR(double(nv.gather_bytes) / bf16.gather_bytes, (0.5 + 1.0 / 16) / 2, 0.01);
  EXPECT_EQ(mx_reuse.grad_bytes, mx.grad_bytes);
  EXPECT_LT(double(mx_reuse.payload_bytes), 0.01 * mx.payload_bytes) << "only the 1-D bf16 params keep a payload buffer";
  EXPECT_LT(mx_reuse.total_bytes(), mx.total_bytes());
}

TEST(MemoryPlan, CliPrintsEveryModeAndRefusesBadInput) {
  mxdp::testing::TempDir d;
  auto ok = mxdp::testing::run_mxdp("plan --model gpt2-124m --dp 8", d / "plan.txt");
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  for (const char* row :
       {"reference", "bf16 gather", "mxfp8 gather", "mxfp8 + grad-buf reuse", "nvfp4 gather", "fp8b128 gather"})
    EXPECT_TRUE(mxdp::testing::contains(ok.output, row)) << row << "\n" << ok.output;
  EXPECT_TRUE(mxdp::testing::contains(ok.output, "0.516x")) << "mxfp8 moves (1 + 1/32) / 2 of bf16\n" << ok.output;
  auto bad = mxdp::testing::run_mxdp("plan --model gpt9", d / "bad.txt");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_TRUE(mxdp::testing::contains(bad.output, "gpt9")) << bad.output;
}

// `mxdp plan --compute-dtype fp8`: a row for the fp8b128 mode with FP8
// compute, whose "fp8 W+W^T" column holds every rank's W and W^T of the block
// linears. The count by hand for d_model 128 (docs/fp8.md's layouts: per
// matrix 1 byte an element, and one fp32 scale per 128x128 tile in the GEMM
// layout, each tile row padded to 4 scales; W^T the same for cols x rows):
//   qkv 384x128   codes 49152, scales W 3x4, W^T 1x4  = 16
//   proj 128x128  codes 16384, scales W 1x4, W^T 1x4  = 8
//   fc 512x128    codes 65536, scales W 4x4, W^T 1x4  = 20
//   proj 128x512  codes 65536, scales W 1x4, W^T 4x4  = 20
// W^T's codes: 196608 bytes a block, and 64 scales of 4 bytes. W's codes are
// read in place in the payload where no shard cut splits the param, else
// copied (buffers.h's Fp8Store):
// - dp 1: nothing is cut: 2 x (196608 + 256) = 393728 bytes = 384.5 KiB;
// - dp 4: the 8 weights, 393216 elements packed back to back (every size a
//   multiple of 64), make shards of 98304 (each cut on a slab boundary: slabs
//   are 128 x cols, 16384 elements but 65536 for mlp.proj). The cuts at 98304
//   and 294912 fall 32768 elements into fc of block 0 (65536..131072) and of
//   block 1 (262144..327680), the one at 196608 between the blocks; so both
//   fc's codes are copied: 393728 + 2 x 65536 = 524800 bytes = 512.5 KiB.
TEST(MemoryPlan, CliShowsFp8ComputeWeights) {
  mxdp::testing::TempDir d;
  const std::string model = "plan --model tiny --n-layer 2 --d-model 128 ";
  const std::string value = R"( +([0-9.]+ [KMG]iB|-))";
  // mode, then masters, adam, grads, payload, fp8 W+W^T, total | gather, ratio, reduce
  const std::regex fp8_row("distributed, fp8b128 \\+ fp8 compute" + value + value + value + value + value + value +
                           " \\|" + value);
  const std::regex fp8b128_row("distributed, fp8b128 gather" + value + value + value + value + value + value + " \\|" +
                               value);
  for (auto [dp, column, bytes] : {std::tuple(1, "384.5 KiB", ": 393728 bytes"), {4, "512.5 KiB", ": 524800 bytes"}}) {
    auto r = mxdp::testing::run_mxdp(model + "--compute-dtype fp8 --dp " + std::to_string(dp), d / "fp8.txt");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::smatch m, bf;
    ASSERT_TRUE(std::regex_search(r.output, m, fp8_row)) << r.output;
    EXPECT_EQ(m[5].str(), column) << "dp " << dp << "\n" << r.output;
    EXPECT_TRUE(mxdp::testing::contains(r.output, "of the 8 linear weights")) << r.output;
    EXPECT_TRUE(mxdp::testing::contains(r.output, bytes)) << r.output;
    // The bf16-compute fp8b128 row stays, with no FP8 weights: the same gather.
    ASSERT_TRUE(std::regex_search(r.output, bf, fp8b128_row)) << r.output;
    EXPECT_EQ(bf[5].str(), "-") << r.output;
    EXPECT_EQ(bf[7].str(), m[7].str()) << r.output;
    for (int c : {1, 2, 3, 4}) EXPECT_EQ(bf[c].str(), m[c].str()) << "column " << c << "\n" << r.output;
  }
  auto plain = mxdp::testing::run_mxdp(model + "--dp 2", d / "plain.txt");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_FALSE(mxdp::testing::contains(plain.output, "fp8 compute")) << plain.output;
  EXPECT_FALSE(mxdp::testing::contains(plain.output, "W+W^T")) << plain.output;
  // What train refuses, plan refuses: linear weights whose sides are not
  // multiples of 16, a dtype that is none of the two. (Every GPT-2 width fits:
  // tiny's d_model 64 ends in partial tiles; so does llama-tiny's, whose four
  // linear weights a block plan as FP8 weights too.)
  auto tiny = mxdp::testing::run_mxdp("plan --model tiny --compute-dtype fp8", d / "tiny.txt");
  EXPECT_EQ(tiny.exit_code, 0) << tiny.output;
  auto llama = mxdp::testing::run_mxdp("plan --model llama-tiny --compute-dtype fp8", d / "llama.txt");
  EXPECT_EQ(llama.exit_code, 0) << llama.output;
  EXPECT_TRUE(mxdp::testing::contains(llama.output, "of the 16 linear weights")) << llama.output;
  for (auto [args, want] : {std::pair{"--model llama-tiny --d-model 32 --n-head 16 --compute-dtype fp8", "multiples of 16"},
                            {"--model tiny --compute-dtype fp16", "--compute-dtype"}}) {
    auto bad = mxdp::testing::run_mxdp(std::string("plan ") + args, d / "bad.txt");
    EXPECT_NE(bad.exit_code, 0) << args << "\n" << bad.output;
    EXPECT_TRUE(mxdp::testing::contains(bad.output, want)) << args << "\n" << bad.output;
  }
}
