// Shared harness of the lifecycle tests: runs a sequence of train steps, evals,
// checkpoint saves and loads on the ToyModel through DataParallel, and records
// every loss and the final weights, so that a run can be compared BITWISE with
// the same sequence in reference mode (DESIGN.md, "The parity contract").
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "check.h"
#include "comm.h"
#include "engine.h"
#include "toy_model.h"

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

// One operation of a sequence.
//   T train step   E eval   S save   L fresh job: new model + engine, load
//   M one micro-batch (forward + backward)   O optimizer step   X end (final eval)
struct SequenceResult {
  std::vector<double> losses;               // in order of the ops that produce one
  std::vector<std::string> tags;            // "T3", "E3", ... for messages
  std::vector<std::vector<float>> masters;  // full fp32 masters per param at the end
  std::vector<std::vector<float>> weights;  // model compute weights after the final eval
  std::string error;                        // first mxdp::Error, if any
  int64_t faults_fired = 0;
};

struct Runner {
  Communicator& comm;
  DpOptions opt;
  std::string save_path;  // where 'S' writes
  std::string load_path;  // what 'L' reads
  uint64_t seed = 1234;
  EngineOps* engine_ops = nullptr;  // the engine's memory work (nullptr: CPU)
  // The model, and how to read its compute weights back to the host (a model
  // on a GPU keeps them in device memory).
  std::function<std::unique_ptr<Model>()> make_model = [] { return std::make_unique<ToyModel>(); };
  std::function<std::vector<float>(Model&, int)> read_weights = [](Model& m, int p) {
    return std::vector<float>(m.weights(p), m.weights(p) + m.params()[p].numel());
  };

  SequenceResult run(const std::string& ops) const {
    SequenceResult r;
    std::unique_ptr<Model> model = make_model();
    model->init_weights(seed);
    auto dp = std::make_unique<DataParallel>(*model, comm, opt, engine_ops);
    const int rank = comm.rank();
    int micro = 0;  // micro-batches of the current step taken by 'M'
    auto eval = [&] {
      std::vector<BatchData> data;
      std::vector<Batch> batches;
      for (int i = 0; i < 2; ++i) data.push_back(make_batch(i, 0, rank, true));
      for (auto& d : data) batches.push_back(d.batch);
      return dp->eval(batches);
    };
    try {
      for (char op : ops) {
        const uint64_t it = uint64_t(dp->iteration());
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
            r.losses.push_back(dp->forward_backward(d.batch));
            r.tags.push_back("M" + std::to_string(it + 1));
            break;
          }
          case 'O':
            micro = 0;
            r.losses.push_back(dp->optimizer_step().loss);
            r.tags.push_back("O" + std::to_string(it + 1));
            break;
          case 'E':
          case 'X':
            r.losses.push_back(eval());
            r.tags.push_back("E" + std::to_string(it));
            break;
          case 'S':
            dp->save_checkpoint(save_path, {{"note", "lifecycle"}});
            break;
          case 'L':
            dp.reset();
            model = make_model();
            model->init_weights(seed + 1);  // different init: only the checkpoint may matter
            dp = std::make_unique<DataParallel>(*model, comm, opt, engine_ops);
            dp->load_checkpoint(load_path);
            break;
          default:
            MXDP_FAIL("unknown op '", op, "'");
        }
      }
      for (int p = 0; p < int(model->params().size()); ++p) {
        r.masters.push_back(dp->full_master(p));
        r.weights.push_back(read_weights(*model, p));
      }
    } catch (const Error& e) {
      r.error = e.what();
    }
    r.faults_fired = dp ? dp->faults_fired() : 0;
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
               F{"nvfp4", WeightFormat::Nvfp4, ScaleRounding::RCeil}})
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
  return out;
}

struct Sequence {
  std::string name;
  std::string ops;
  int micro_batches = 1;
  bool odd_buckets = false;  // g: forward-order layout, one param per bucket
  bool needs_checkpoint = false;
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

// "" when bitwise equal, else where they first differ.
inline std::string compare(const SequenceResult& a, const SequenceResult& ref) {
  if (!a.error.empty()) return "run failed: " + a.error;
  if (!ref.error.empty()) return "reference failed: " + ref.error;
  if (a.losses.size() != ref.losses.size()) return "different number of losses";
  for (size_t i = 0; i < a.losses.size(); ++i)
    if (std::memcmp(&a.losses[i], &ref.losses[i], sizeof(double)) != 0)
      return "loss " + a.tags[i] + " differs: " + std::to_string(a.losses[i]) + " vs reference " +
             std::to_string(ref.losses[i]);
  for (size_t p = 0; p < a.masters.size(); ++p) {
    if (a.masters[p].size() != ref.masters[p].size() ||
        std::memcmp(a.masters[p].data(), ref.masters[p].data(), a.masters[p].size() * 4) != 0)
      return "final master weights of param " + std::to_string(p) + " differ";
    if (std::memcmp(a.weights[p].data(), ref.weights[p].data(), a.weights[p].size() * 4) != 0)
      return "final model weights of param " + std::to_string(p) + " differ";
  }
  return "";
}

}  // namespace mxdp::testing
