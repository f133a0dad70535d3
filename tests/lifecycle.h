// Shared harness of the lifecycle tests: runs a sequence of train steps, evals,
// syncs, checkpoint saves and loads on the ToyModel through DataParallel, and
// records every loss and the final weights, so that a run can be compared
// BITWISE with the same sequence in reference mode (docs/engine.md, "The parity
// contract"). Every read of the weights is held to the oracle (oracle.h), which
// also sees bugs both modes share. Failures are agreed across ranks after every
// op, so every rank stops at the same op and reports the same thing.
// FP8 compute: the model wrapper reads W and W^T through the hooks for the
// toy's linear layers and holds them to the oracle too.
// One file (over 500 lines): the runner, its model wrapper and the config
// matrix are one harness that every lifecycle test (CPU and GPU) includes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "util/check.h"
#include "comm/comm.h"
#include "engine/engine.h"
#include "fp8_ref.h"
#include "oracle.h"
#include "models/toy/toy_model.h"

namespace mxdp::testing {

// Deterministic synthetic data: a function of (step, micro-batch, rank, kind),
// so a run resumed from a checkpoint sees the same batches as an uninterrupted one.
struct BatchData {
  std::vector<int32_t> in, tgt;
  Batch batch;
};
inline BatchData make_batch(uint64_t step, int micro, int rank, bool eval, int B = 2, int T = 8,
                            int V = 64) {
  BatchData d;
  d.in.resize(B * T);
  d.tgt.resize(B * T);
  uint64_t s = step * 1000003ull + micro * 7919ull + rank * 104729ull + (eval ? 0xE7A1ull : 0);
  auto next = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return uint32_t(s >> 33);
  };
  // A learnable pattern (next = (tok * 5 + 3) mod V) with some noise.
  for (int b = 0; b < B; ++b) {
    int32_t t = int32_t(next() % V);
    for (int i = 0; i < T; ++i) {
      d.in[b * T + i] = t;
      int32_t nx = (next() % 8 == 0) ? int32_t(next() % V) : (t * 5 + 3) % V;
      d.tgt[b * T + i] = nx;
      t = nx;
    }
  }
  d.batch = {d.in.data(), d.tgt.data(), B, T};
  return d;
}

// ---- agreeing across ranks ----------------------------------------------------

// Collective over `c` (host memory): every rank gives its message ("" for
// none) and every rank gets every rank's message, in rank order.
inline std::vector<std::string> gather_strings(Communicator& c, const std::string& mine) {
  MXDP_CHECK(!c.device_memory(), "gather_strings needs a host-memory communicator");
  const int n = c.size(), me = c.rank();
  std::vector<uint64_t> len(n, 0);
  len[me] = mine.size();
  c.all_gather(&len[me], len.data(), sizeof(uint64_t));
  uint64_t longest = 0;
  for (uint64_t l : len) longest = std::max(longest, l);
  std::vector<std::string> out(n);
  if (longest == 0) return out;
  std::vector<char> all(size_t(n) * longest, 0);
  std::memcpy(all.data() + size_t(me) * longest, mine.data(), mine.size());
  c.all_gather(all.data() + size_t(me) * longest, all.data(), longest);
  for (int r = 0; r < n; ++r) out[r].assign(all.data() + size_t(r) * longest, len[r]);
  return out;
}

// The same text on every rank: "" when no rank has a message, else each
// distinct message once, with the ranks that reported it.
inline std::string summarize(const std::vector<std::string>& per_rank) {
  std::string out;
  std::vector<bool> done(per_rank.size(), false);
  for (size_t r = 0; r < per_rank.size(); ++r) {
    if (per_rank[r].empty() || done[r]) continue;
    std::string ranks;
    for (size_t q = r; q < per_rank.size(); ++q)
      if (!done[q] && per_rank[q] == per_rank[r]) {
        done[q] = true;
        ranks += (ranks.empty() ? "" : ",") + std::to_string(q);
      }
    out += (out.empty() ? "" : "\n") + std::string("[rank ") + ranks + " of " + std::to_string(per_rank.size()) +
           "] " + per_rank[r];
  }
  return out;
}

// ---- a model whose reads are held to the oracle -------------------------------

// Wraps a model for the engine; while the wrapped model runs a forward, calls
// `on_read(L)` right after the engine's before_layer(L) returned (the weights
// of layer L are what the layer is about to read) and `on_read(-1)` once the
// forward is done. Everything else passes through.
class OracleModel final : public Model {
 public:
  // FP8 compute: on_fp8(p, w, transposed) sees every W the forward reads
  // (params with fp8[p], after their before_layer) and every W^T at the
  // start of backward, which is when the model's dgrads would read them.
  using Fp8Read = std::function<void(int, const Fp8Weight&, bool)>;
  OracleModel(std::unique_ptr<Model> inner, std::function<void(int)> on_read, std::vector<bool> fp8 = {},
              Fp8Read on_fp8 = nullptr)
      : in_(std::move(inner)), on_read_(std::move(on_read)), fp8_(std::move(fp8)), on_fp8_(std::move(on_fp8)) {
    fp8_.resize(in_->params().size(), false);
    specs_ = in_->params();
    for (size_t p = 0; p < specs_.size(); ++p) specs_[p].fp8_linear = fp8_[p];  // what the wrapper reads as FP8
  }
  Model& inner() { return *in_; }
  const std::vector<ParamSpec>& params() const override { return specs_; }
  int num_layers() const override { return in_->num_layers(); }
  float* weights(int p) override { return in_->weights(p); }
  ComputeDType compute_dtype() const override { return in_->compute_dtype(); }
  void* compute_weights(int p) override { return in_->compute_weights(p); }
  const float* initial_weights(int p) override { return in_->initial_weights(p); }
  void release_initial_weights() override { in_->release_initial_weights(); }
  void init_weights(uint64_t seed) override { in_->init_weights(seed); }
  float forward(const Batch& b, ModelHooks& hooks) override {
    Tap tap(hooks, *this);
    const float loss = in_->forward(b, tap);
    on_read_(-1);
    return loss;
  }
  void forward_into(const Batch& b, ModelHooks& hooks, float* loss) override {
    Tap tap(hooks, *this);
    in_->forward_into(b, tap, loss);  // loss: the inner model's memory space
    on_read_(-1);
  }
  void backward(ModelHooks& hooks) override {
    for (int p = 0; p < int(fp8_.size()); ++p)
      if (fp8_[p]) on_fp8_(p, hooks.fp8_weight_transposed(p), true);
    in_->backward(hooks);
  }
  bool reads_fp8_weights() const override { return bool(on_fp8_); }
  bool fp8(int p) const { return fp8_[p]; }
  void read_fp8(int p, const Fp8Weight& w) { on_fp8_(p, w, false); }

 private:
  struct Tap final : ModelHooks {
    ModelHooks& in;
    OracleModel& m;
    Tap(ModelHooks& h, OracleModel& om) : in(h), m(om) {}
    void before_layer(int l) override {
      in.before_layer(l);
      for (int p = 0; p < int(m.fp8_.size()); ++p)
        if (m.fp8_[p] && m.params()[p].layer == l) m.on_fp8_(p, in.fp8_weight(p), false);
      m.on_read_(l);
    }
    float* grad(int p) override { return in.grad(p); }
    void after_layer_backward(int l) override { in.after_layer_backward(l); }
    Fp8Weight fp8_weight(int p) override { return in.fp8_weight(p); }  // a model with its own FP8 path
    Fp8Weight fp8_weight_transposed(int p) override { return in.fp8_weight_transposed(p); }
  };
  std::unique_ptr<Model> in_;
  std::function<void(int)> on_read_;
  std::vector<ParamSpec> specs_;
  std::vector<bool> fp8_;
  Fp8Read on_fp8_;
};

// ---- sequences ------------------------------------------------------------------

// One operation of a sequence.
//   T train step   E eval   S save   L fresh job: new model + engine, load
//   l load into the engine as it is (it has trained: its buckets hold state)
//   Y sync_weights (what a sampler does before reading the weights)
//   M one micro-batch (forward + backward)   O optimizer step   X end (final eval)
// Every op that reads weights (T M E X: each forward, layer by layer; Y: after
// it) is held to the oracle (oracle.h).
inline bool reads_weights(char op) { return op == 'T' || op == 'M' || op == 'E' || op == 'X' || op == 'Y'; }

struct SequenceResult {
  std::vector<double> losses;               // in order of the ops that produce one
  std::vector<std::string> tags;            // "T3", "E3", ... for messages
  std::vector<std::vector<float>> masters;  // full fp32 masters per param at the end
  std::vector<std::vector<uint8_t>> weights;  // model compute weights (compute_dtype bytes) at the end
  ComputeDType weights_dtype = ComputeDType::F32;
  // The first failure, the same text on every rank ("" = none): an mxdp::Error
  // thrown on any rank, and the oracle's first mismatch on any rank.
  std::string error;
  std::string oracle;
  int64_t oracle_checks = 0;  // param comparisons the oracle made (this rank)
  int64_t fp8_checks = 0;     // FP8 W and W^T comparisons (FP8 compute)
};

// Param comparisons a clean run of `ops` makes: every forward compares every
// param at its layer and again at the end of the forward; sync_weights every
// param once. A count short of this means reads escaped the oracle.
inline int64_t expected_oracle_checks(const std::string& ops, int micro_batches, int64_t num_params,
                                      int eval_batches = 2) {
  int64_t forwards = 0, syncs = 0;
  for (char op : ops) {
    if (op == 'T') forwards += micro_batches;
    if (op == 'M') forwards += 1;
    if (op == 'E' || op == 'X') forwards += eval_batches;
    if (op == 'Y') syncs += 1;
  }
  return num_params * (2 * forwards + syncs);
}

// The toy model of a format: the default one (d 32, h 64), or for fp8b128
// vocab 200, d 192, h 320: every 2-D weight in fp8b128 and every one ending in
// partial tiles (mlp.up.w 320 x 192: a last slab of 64 rows and a last tile
// column of 64; mlp.down.w 192 x 320; the embedding and head 200 x 192), so
// shards cut them between whole slabs after the first, and each piece's
// scales sit where the layout puts them (a slab holds 1.5 or 2.5 tiles'
// elements but 2 or 3 scales).
inline std::unique_ptr<Model> toy_for(WeightFormat f) {
  if (f == WeightFormat::Fp8b128) return std::make_unique<ToyModel>(200, 192, 320);
  return std::make_unique<ToyModel>();
}

// FP8 compute: the params read as FP8 W / W^T: the toy's linear layers
// (mlp.up.w, mlp.down.w) when they travel in fp8b128; the embedding and the
// LM head keep dequantized weights (as GPT-2's do).
inline std::vector<bool> toy_fp8_linear(const std::vector<ParamSpec>& specs, const DpOptions& o) {
  std::vector<bool> out(specs.size(), false);
  for (size_t p = 0; p < specs.size(); ++p)
    out[p] = o.compute_dtype == LinearCompute::Fp8 && oracle_format(specs[p], o.weight_format) == WeightFormat::Fp8b128 &&
             (specs[p].name == "mlp.up.w" || specs[p].name == "mlp.down.w");
  return out;
}

struct Runner {
  Communicator& comm;
  DpOptions opt;
  std::string save_path;  // where 'S' writes
  std::string load_path;  // what 'L' and 'l' read
  uint64_t seed = 1234;
  EngineOps* engine_ops = nullptr;  // the engine's memory work (nullptr: CPU)
  // The model, and a host copy of param p's compute weights (compute_dtype
  // bytes; a model on a GPU keeps them in device memory).
  // (nullptr: toy_for(opt.weight_format))
  std::function<std::unique_ptr<Model>()> make_model = nullptr;
  std::function<std::vector<uint8_t>(Model&, int)> read_compute = [](Model& m, int p) {
    const auto* b = static_cast<const uint8_t*>(m.compute_weights(p));
    return std::vector<uint8_t>(b, b + m.params()[p].numel() * compute_dtype_bytes(m.compute_dtype()));
  };
  // Where the ranks agree on failures after every op: a host-memory
  // communicator over the same ranks (nullptr: comm, which must be one).
  Communicator* control = nullptr;
  // Test only: called on every rank after op i succeeded there (a test makes
  // one rank misbehave through it).
  std::function<void(Model&, int)> tamper = nullptr;
  // false: an oracle mismatch is recorded but the run goes on (to see what
  // parity alone would have said); errors still stop it.
  bool stop_on_oracle = true;
  // FP8 compute with a model that has its own FP8 path (the GPU GPT): the
  // runner turns it on (set_fp8_compute), the params it reads as FP8 are its
  // fp8_linear ones, and the wrapper only holds the W / W^T it reads to the
  // oracle (they have no compute weights; their final W is in `weights`).
  bool own_fp8 = false;
  // Copies n bytes of FP8 weights the engine handed out into host memory
  // (device memory for a GPU engine).
  std::function<void(void*, const void*, size_t)> copy_out = [](void* d, const void* s, size_t n) {
    std::memcpy(d, s, n);
  };

  SequenceResult run(const std::string& ops) const {
    SequenceResult r;
    Communicator& ctl = control ? *control : comm;
    Oracle oracle;
    std::unique_ptr<OracleModel> model;
    std::unique_ptr<DataParallel> dp;
    std::string where;  // the op running, for the oracle's messages
    const int rank = comm.rank();
    // layer >= 0: the params layer L is about to read; -1: every param at the
    // end of a forward; -2: every param after sync_weights.
    auto check = [&](int layer) {
      Model& m = model->inner();
      const std::string at = layer >= 0 ? " forward, layer " + std::to_string(layer)
                                        : (layer == -1 ? ", end of the forward" : ", after sync_weights");
      for (int p = 0; p < int(m.params().size()); ++p)
        if ((layer < 0 || m.params()[p].layer == layer) && !(own_fp8 && model->fp8(p)))
          oracle.check(p, read_compute(m, p), where + at);
    };
    // FP8 compute: which params the model reads as FP8 W (the oracle's rule),
    // each read checked bit for bit; W is then dequantized into the toy's
    // fp32 weights, as if the toy's GEMMs read it (host memory: the CPU ops).
    const bool fp8c = opt.compute_dtype == LinearCompute::Fp8;
    auto on_fp8 = [&](int p, const Fp8Weight& w, bool transposed) {
      const ParamSpec& s = model->params()[p];
      const int64_t n = s.numel();
      const int64_t ld = ((w.cols + 127) / 128 + 3) / 4 * 4;
      std::vector<uint8_t> codes(static_cast<size_t>(n));
      std::vector<float> scales(size_t((w.rows + 127) / 128 * ld));
      copy_out(codes.data(), w.codes, codes.size());
      copy_out(scales.data(), w.scales, scales.size() * sizeof(float));
      oracle.check_fp8(p, codes, scales, transposed, where + (transposed ? " backward" : " forward"));
      if (transposed || own_fp8) return;
      float* dst = model->inner().weights(p);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t r = i / w.cols, c = i % w.cols;
        dst[i] = fp8ref::dequant(codes[size_t(i)], scales[size_t(r / 128 * ld + c / 128)], true);
      }
    };
    auto new_job = [&](uint64_t init_seed) {
      dp.reset();
      auto inner = make_model ? make_model() : toy_for(opt.weight_format);
      inner->init_weights(init_seed);
      std::vector<bool> fp8 = toy_fp8_linear(inner->params(), opt);
      if (own_fp8 && fp8c) {
        inner->set_fp8_compute(opt.model_fp8_compute());
        for (size_t p = 0; p < fp8.size(); ++p)
          fp8[p] = inner->params()[p].fp8_linear &&
                   oracle_format(inner->params()[p], opt.weight_format) == WeightFormat::Fp8b128;
      }
      model = fp8c ? std::make_unique<OracleModel>(std::move(inner), check, fp8, on_fp8)
                   : std::make_unique<OracleModel>(std::move(inner), check);
      dp = std::make_unique<DataParallel>(*model, comm, opt, engine_ops);
    };
    // Runs one part on every rank, then every rank learns whether any failed.
    auto agreed = [&](const std::function<void()>& fn) {
      std::string err;
      try {
        fn();
      } catch (const std::exception& e) {
        err = e.what();
        if (err.empty()) err = "exception without a message";
      }
      // One collective for both findings: "<error>\x1f<oracle>".
      const auto all = gather_strings(ctl, err.empty() && oracle.failure().empty() ? "" : err + '\x1f' + oracle.failure());
      std::vector<std::string> errs(all.size()), orc(all.size());
      for (size_t q = 0; q < all.size(); ++q) {
        if (all[q].empty()) continue;
        const size_t cut = all[q].find('\x1f');
        errs[q] = all[q].substr(0, cut);
        orc[q] = all[q].substr(cut + 1);
      }
      r.error = summarize(errs);
      r.oracle = summarize(orc);
      return r.error.empty() && (r.oracle.empty() || !stop_on_oracle);
    };
    int micro = 0;  // micro-batches of the current step taken by 'M'
    auto eval = [&] {
      std::vector<BatchData> data;
      std::vector<Batch> batches;
      for (int i = 0; i < 2; ++i) data.push_back(make_batch(i, 0, rank, true));
      for (auto& d : data) batches.push_back(d.batch);
      return dp->eval(batches);
    };
    bool ok = agreed([&] { new_job(seed); });
    bool masters_moved = true;  // since the oracle last read them: a step, a load, a new job
    for (size_t i = 0; ok && i < ops.size(); ++i) {
      const char op = ops[i];
      ok = agreed([&] {
        const uint64_t it = uint64_t(dp->iteration());
        if (reads_weights(op) && masters_moved) {  // collective: the masters as they are before this op
          std::vector<std::vector<float>> masters;
          for (int p = 0; p < int(model->params().size()); ++p) masters.push_back(dp->full_master(p));
          oracle.expect(model->params(), masters, opt.weight_format, opt.mxfp8_scale_rounding,
                        model->compute_dtype(), fp8c);
          masters_moved = false;
        }
        if (!reads_weights(op)) oracle.disarm();
        if (op == 'T' || op == 'O' || op == 'L' || op == 'l') masters_moved = true;
        where = std::string(1, op) + " (op " + std::to_string(i + 1) + " of '" + ops + "', version " +
                std::to_string(dp->version()) + ")";
        switch (op) {
          case 'T': {
            std::vector<BatchData> data;
            std::vector<Batch> mbs;
            for (int m = 0; m < opt.micro_batches; ++m) data.push_back(make_batch(it, m, rank, false));
            for (auto& d : data) mbs.push_back(d.batch);
            r.losses.push_back(dp->train_step(mbs).loss);
            r.tags.push_back("T" + std::to_string(it + 1));
            break;
          }
          case 'M': {
            auto d = make_batch(it, micro++, rank, false);
            dp->forward_backward(d.batch);  // its loss comes with the step's result
            break;
          }
          case 'O': {
            micro = 0;
            const StepResult sr = dp->optimizer_step();
            for (size_t m = 0; m < sr.micro_losses.size(); ++m) {
              r.losses.push_back(sr.micro_losses[m]);
              r.tags.push_back("M" + std::to_string(it + 1) + "." + std::to_string(m + 1));
            }
            r.losses.push_back(sr.loss);
            r.tags.push_back("O" + std::to_string(it + 1));
            break;
          }
          case 'E':
          case 'X':
            r.losses.push_back(eval());
            r.tags.push_back("E" + std::to_string(it));
            break;
          case 'Y':
            dp->sync_weights();
            for (int p = 0; p < int(model->params().size()); ++p)
              if (model->fp8(p)) model->read_fp8(p, dp->fp8_weight(p));
            check(-2);
            break;
          case 'S':
            dp->save_checkpoint(save_path, {{"note", "lifecycle"}});
            break;
          case 'L':
            new_job(seed + 1);  // different init: only the checkpoint may matter
            dp->load_checkpoint(load_path);
            break;
          case 'l':
            dp->load_checkpoint(load_path);
            break;
          default:
            MXDP_FAIL("unknown op '", op, "'");
        }
        if (tamper) tamper(model->inner(), int(i));
      });
    }
    if (ok)
      agreed([&] {
        if (own_fp8 && fp8c) dp->sync_weights();  // collective: W fresh for the reads below
        for (int p = 0; p < int(model->params().size()); ++p) {
          r.masters.push_back(dp->full_master(p));
          if (own_fp8 && model->fp8(p)) {  // its W codes (the weights it computes with)
            const Fp8Weight w = dp->fp8_weight(p);
            std::vector<uint8_t> codes(size_t(model->params()[p].numel()));
            copy_out(codes.data(), w.codes, codes.size());
            r.weights.push_back(std::move(codes));
          } else {
            r.weights.push_back(read_compute(model->inner(), p));
          }
        }
        r.weights_dtype = model->compute_dtype();
      });
    r.oracle_checks = oracle.checks();
    r.fp8_checks = oracle.fp8_checks();
    return r;
  }
};

// ---- the matrix the lifecycle tests run -----------------------------------------

struct Config {
  std::string name;
  DpOptions opt;
};

inline DpOptions base_options() {
  DpOptions o;
  o.lr = 2e-2;
  o.min_lr = 2e-3;
  o.warmup_steps = 2;
  o.lr_decay_steps = 8;
  o.clip_grad = 0.5;
  o.weight_decay = 0.1;
  o.bucket_size = 3000;
  return o;
}

inline std::vector<Config> configs() {
  std::vector<Config> out;
  struct F {
    const char* name;
    WeightFormat f;
    ScaleRounding r;
  };
  for (F fm : {F{"bf16", WeightFormat::Bf16, ScaleRounding::RCeil},
               F{"mxfp8", WeightFormat::Mxfp8, ScaleRounding::RCeil},
               F{"mxfp8-floor", WeightFormat::Mxfp8, ScaleRounding::Floor},
               F{"nvfp4", WeightFormat::Nvfp4, ScaleRounding::RCeil},
               F{"fp8b128", WeightFormat::Fp8b128, ScaleRounding::RCeil}})
    for (bool ovl : {false, true})
      for (bool reuse : {false, true}) {
        if (reuse && fm.f != WeightFormat::Mxfp8) continue;
        Config c{std::string(fm.name) + (ovl ? "+overlap" : "") + (reuse ? "+reuse" : ""), base_options()};
        c.opt.weight_format = fm.f;
        c.opt.mxfp8_scale_rounding = fm.r;
        c.opt.overlap_param_gather = ovl;
        c.opt.overlap_grad_reduce = ovl;
        c.opt.reuse_grad_buf = reuse;
        // bf16 gradient reduction in some configs, fp32 in the rest
        c.opt.grad_reduce_dtype = (fm.f == WeightFormat::Nvfp4 || (fm.f == WeightFormat::Bf16 && ovl))
                                      ? GradReduceDType::Bf16
                                      : GradReduceDType::Fp32;
        out.push_back(c);
      }
  // FP8 compute: the model reads the fp8b128 codes (W, W^T), not dequantized weights.
  for (bool ovl : {false, true}) {
    Config c{std::string("fp8b128+fp8") + (ovl ? "+overlap" : ""), base_options()};
    c.opt.weight_format = WeightFormat::Fp8b128;
    c.opt.compute_dtype = LinearCompute::Fp8;
    c.opt.overlap_param_gather = ovl;
    c.opt.overlap_grad_reduce = ovl;
    out.push_back(c);
  }
  return out;
}

struct Sequence {
  std::string name;
  std::string ops;
  int micro_batches = 1;
  bool odd_buckets = false;  // g: forward-order layout, one param per bucket
  bool needs_checkpoint = false;  // loads the step-3 checkpoint sequence d saved
  uint64_t seed = 1234;      // init of the first model (h-j: not the checkpoint's trajectory)
};

inline const std::vector<Sequence>& sequences() {
  static const std::vector<Sequence> s = {
      {"a_train_eval_each_step", "TETETETETETEX"},
      {"b_eval_before_first_step", "ETTTX"},
      {"c_two_evals_between_steps", "TEETTX"},
      {"d_save_at_3_continue", "TTTSTTTX"},
      {"d_load_in_fresh_job", "LTTTX", 1, false, true},
      {"e_load_eval_first", "LETTTX", 1, false, true},
      {"f_micro_batches_eval_between", "MEMMOETEMMMOX", 3},
      {"g_bucket_order_tiny_buckets", "TETETTX", 1, true},
      // An engine that trained from another init loads the step-3 checkpoint:
      // at its own version (3), then from version 1 (forward) and 6 (back).
      {"h_load_trained_same_version", "TTTlETTTX", 1, false, true, 4321},
      {"i_load_trained_other_versions", "TlTTTlTTTX", 1, false, true, 4321},
      // sync_weights before any step, after train, after eval, after a load.
      {"j_sync_after_train_eval_load", "YTYEYTYlYTX", 1, false, true, 4321},
      {"k_load_sync_in_fresh_job", "LYTYX", 1, false, true},
  };
  return s;
}

inline DpOptions for_sequence(DpOptions o, const Sequence& s) {
  o.micro_batches = s.micro_batches;
  if (s.odd_buckets) {
    o.bucket_size = 1;
    o.layout_order.clear();
    for (int p = 0; p < 7; ++p) o.layout_order.push_back(p);  // forward order, not backward
  }
  return o;
}

// "" when the run and its reference both passed (no error, oracle held) and
// are bitwise equal; else the first failure or where they first differ.
// parity_only: the same, blind to the oracle (what parity alone would say).
inline std::string compare(const SequenceResult& a, const SequenceResult& ref, bool parity_only = false) {
  if (!a.error.empty()) return "run failed: " + a.error;
  if (!a.oracle.empty() && !parity_only) return "run failed the " + a.oracle;
  if (!ref.error.empty()) return "reference failed: " + ref.error;
  if (!ref.oracle.empty() && !parity_only) return "reference failed the " + ref.oracle;
  if (a.losses.size() != ref.losses.size() || a.tags != ref.tags)
    return "different losses recorded: " + std::to_string(a.losses.size()) + " vs reference " +
           std::to_string(ref.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i)
    if (!same_bits(a.losses[i], ref.losses[i])) {
      char b[160];
      std::snprintf(b, sizeof b, "%.17g vs reference %.17g", a.losses[i], ref.losses[i]);
      return "loss " + a.tags[i] + " differs: " + b;
    }
  if (a.masters.size() != ref.masters.size() || a.weights.size() != ref.weights.size())
    return "different number of params";
  if (a.weights_dtype != ref.weights_dtype) return "different compute dtypes";
  for (size_t p = 0; p < a.masters.size(); ++p) {
    if (!same_bits(a.masters[p], ref.masters[p]))
      return "final master weights of param " + std::to_string(p) + " differ";
    const std::string d = bit_mismatch(a.weights[p], ref.weights[p], a.weights_dtype);
    if (!d.empty()) return "final model weights of param " + std::to_string(p) + " differ: " + d;
  }
  return "";
}

}  // namespace mxdp::testing
