// links: mxdp_core_testing (the fault switches of src/engine/faults.h)
//
// The lifecycle tests of the data-parallel core (docs/engine.md, "The parity
// contract" and "Tests"): for every weight_format x overlap_param_gather x
// reuse_grad_buf and every dp size this file runs under (mpirun -np 1..4),
// each sequence of train steps, evals, syncs, saves and loads gives train
// losses, eval losses and final weights BITWISE equal to the same sequence in
// reference mode, and every read of the weights, in both modes, equals the
// oracle's quantize-then-dequantize of the fp32 masters (oracle.h). Then fault
// switches re-create real stale-weight bugs: every run a fault touches must
// fail, and the bugs that keep the version bookkeeping consistent must fail
// through the oracle, even when reference mode has the same bug.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <tuple>

#include "io/checkpoint.h"
#include "engine/faults.h"
#include "lifecycle.h"
#include "models/gpt2/gpt.h"

using namespace mxdp;
using namespace mxdp::testing;

namespace {

Communicator& world() {
  // A desynchronised collective ends the job after 120 s with a report, not
  // after the default 300 (ctest would kill it first).
  static std::unique_ptr<Communicator> c = [] {
    Communicator::Options o;
    o.timeout_s = 120;
    return make_communicator(o);
  }();
  return *c;
}

// A scratch directory every rank agrees on (rank 0 creates it; if it cannot,
// every rank gets the error).
const std::string& scratch() {
  static std::string dir = [] {
    char buf[256] = {};
    on_rank0(world(), [&] {
      std::string t = (std::filesystem::temp_directory_path() / "mxdp_lifecycle_XXXXXX").string();
      MXDP_CHECK(::mkdtemp(t.data()), "mkdtemp failed for ", t);
      std::snprintf(buf, sizeof buf, "%s", t.c_str());
    });
    world().broadcast(buf, sizeof buf, 0);
    return std::string(buf);
  }();
  return dir;
}

// The largest of every rank's value (e.g. how often a fault fired there).
int64_t max_over_ranks(int64_t mine) {
  double v = double(mine);
  world().all_reduce(&v, &v, 1, DType::F64, RedOp::Max);
  return int64_t(v);
}

faults::Switches fault(int which) {
  faults::Switches sw;
  sw.skip_stage_before_forced_gather = which == 0;
  sw.skip_unpack = which == 1;
  sw.skip_deferred_reset_after_eval = which == 2;
  return sw;
}

// Runs `r` with the fault switches `sw` on; returns how often they fired (on
// any rank).
SequenceResult run_faulty(const Runner& r, const std::string& ops, const faults::Switches& sw, int64_t* fired) {
  const int64_t before = faults::fired();
  SequenceResult res;
  {
    faults::ScopedFaults on(sw);
    res = r.run(ops);
  }
  *fired = max_over_ranks(faults::fired() - before);
  return res;
}

std::string ckpt(const std::string& cfg, bool reference) {
  return scratch() + "/" + cfg + (reference ? "-ref" : "-dist") + ".ckpt";
}

// Results of the clean runs, shared by the tests below.
struct Clean {
  std::map<std::string, SequenceResult> dist, ref;  // key: config/sequence
};
Clean& clean() {
  static Clean c = [] {
    Clean c;
    for (const Config& cfg : configs())
      for (const Sequence& s : sequences()) {
        const std::string key = cfg.name + "/" + s.name;
        DpOptions o = for_sequence(cfg.opt, s);
        Runner dist{world(), o, ckpt(cfg.name, false), ckpt(cfg.name, false)};
        Runner ref{world(), o.reference(), ckpt(cfg.name, true), ckpt(cfg.name, true)};
        dist.seed = ref.seed = s.seed;
        c.ref[key] = ref.run(s.ops);
        c.dist[key] = dist.run(s.ops);
      }
    return c;
  }();
  return c;
}

}  // namespace

TEST(Lifecycle, BitwiseEqualToReference) {
  for (const Config& cfg : configs())
    for (const Sequence& s : sequences()) {
      const std::string key = cfg.name + "/" + s.name;
      EXPECT_EQ(compare(clean().dist.at(key), clean().ref.at(key)), "") << "dp=" << world().size() << " " << key;
    }
}

TEST(Lifecycle, OracleHoldsEveryReadInBothModes) {
  // Every forward, layer by layer, and every sync_weights, in the sharded run
  // and in the reference run: the compute weights are quantize-then-dequantize
  // of the fp32 masters (oracle.h). The count guards against reads that
  // escaped the oracle (a forward without hooks, an op the harness skipped).
  for (const Config& cfg : configs())
    for (const Sequence& s : sequences()) {
      const std::string key = cfg.name + "/" + s.name;
      const int64_t want = expected_oracle_checks(s.ops, s.micro_batches, 7);
      for (const auto* mode : {&clean().dist, &clean().ref}) {
        const SequenceResult& r = mode->at(key);
        const char* m = mode == &clean().dist ? " (sharded)" : " (reference)";
        EXPECT_EQ(r.error, "") << key << m;
        EXPECT_EQ(r.oracle, "") << key << m;
        EXPECT_EQ(r.oracle_checks, want) << key << m << ": reads the oracle did not see";
      }
    }
}

TEST(Lifecycle, ResumeGivesTheUninterruptedLosses) {
  // After loading the step-3 checkpoint, a run continues exactly like the
  // uninterrupted one, whatever state the engine had: a fresh job (d, e, k) or
  // an engine that trained from another init, at version 3, 1 or 6 (h, i).
  for (const Config& cfg : configs()) {
    const SequenceResult& full = clean().dist.at(cfg.name + "/d_save_at_3_continue");
    ASSERT_EQ(full.error, "") << cfg.name;
    ASSERT_EQ(full.tags, (std::vector<std::string>{"T1", "T2", "T3", "T4", "T5", "T6", "E6"})) << cfg.name;
    // (sequence, index of its first loss after a load, losses that follow T4 T5 T6 E6)
    const std::vector<std::tuple<std::string, size_t, size_t>> resumed = {
        {"d_load_in_fresh_job", 0, 4}, {"e_load_eval_first", 1, 4}, {"h_load_trained_same_version", 4, 4},
        {"i_load_trained_other_versions", 1, 3}, {"i_load_trained_other_versions", 4, 4}};
    for (const auto& [seq, at, n] : resumed) {
      const SequenceResult& r = clean().dist.at(cfg.name + "/" + seq);
      ASSERT_EQ(r.error, "") << cfg.name << "/" << seq;
      ASSERT_GE(r.losses.size(), at + n) << cfg.name << "/" << seq;
      for (size_t i = 0; i < n; ++i)
        EXPECT_TRUE(same_bits(full.losses[3 + i], r.losses[at + i]))
            << cfg.name << "/" << seq << " " << r.tags[at + i] << ": " << r.losses[at + i] << " vs uninterrupted "
            << full.tags[3 + i] << " " << full.losses[3 + i];
    }
    // The eval right after a load sees the checkpoint's weights, whatever the engine held.
    const SequenceResult& e = clean().dist.at(cfg.name + "/e_load_eval_first");
    const SequenceResult& h = clean().dist.at(cfg.name + "/h_load_trained_same_version");
    ASSERT_GE(h.losses.size(), 4u);
    EXPECT_EQ(h.tags[3], "E3");
    EXPECT_TRUE(same_bits(e.losses[0], h.losses[3])) << cfg.name << ": E3 after loading into a trained engine "
                                                     << h.losses[3] << " vs in a fresh job " << e.losses[0];
    for (const char* seq : {"d_load_in_fresh_job", "e_load_eval_first", "h_load_trained_same_version",
                            "i_load_trained_other_versions"}) {
      const SequenceResult& r = clean().dist.at(cfg.name + "/" + seq);
      ASSERT_EQ(r.masters.size(), full.masters.size()) << seq;
      for (size_t p = 0; p < full.masters.size(); ++p)
        EXPECT_TRUE(same_bits(full.masters[p], r.masters[p])) << cfg.name << "/" << seq << " param " << p;
    }
  }
}

TEST(Lifecycle, LossesMove) {
  // Guard against a vacuous comparison: training must change the loss and the
  // low-precision formats must differ from each other; the runs from another
  // init (h) really start elsewhere, so that loading into them changes state.
  const SequenceResult& a = clean().dist.at("mxfp8/a_train_eval_each_step");
  const SequenceResult& b = clean().dist.at("nvfp4/a_train_eval_each_step");
  const SequenceResult& d = clean().dist.at("mxfp8/d_save_at_3_continue");
  const SequenceResult& h = clean().dist.at("mxfp8/h_load_trained_same_version");
  ASSERT_EQ(a.error, "");
  ASSERT_EQ(b.error, "");
  ASSERT_GE(h.losses.size(), 3u);
  ASSERT_GE(d.losses.size(), 3u);
  EXPECT_FALSE(same_bits(a.losses.front(), a.losses.back()));
  EXPECT_LT(a.losses.back(), a.losses[1]) << "eval loss after training should fall";
  EXPECT_FALSE(same_bits(a.losses[1], b.losses[1]));
  EXPECT_FALSE(same_bits(h.losses[2], d.losses[2])) << "T3 from another init gave the checkpoint's loss";
}

class Faults : public ::testing::TestWithParam<int> {};

TEST_P(Faults, EveryAffectedRunIsCaught) {
  // Fault 0 (gather a shard never re-staged) and 1 (unpack recorded, not done)
  // keep the version bookkeeping consistent: no freshness check can see them,
  // so the oracle must (with grad-buffer reuse, fault 0 is refused earlier: the
  // region of a bucket never staged still holds gradients). Fault 2 leaves a
  // stale version behind: the freshness check or the oracle. A run counts as
  // unnoticed only against a reference the oracle verified.
  const int which = GetParam();
  int64_t fired_runs = 0, by_oracle = 0, by_check = 0, by_parity = 0;
  for (const Config& cfg : configs())
    for (const Sequence& s : sequences()) {
      const std::string key = cfg.name + "/" + s.name;
      const SequenceResult& ref = clean().ref.at(key);
      if (!ref.error.empty() || !ref.oracle.empty()) {
        ADD_FAILURE() << "the reference run of " << key << " failed (" << ref.error << ref.oracle
                      << "): fault " << which << " cannot be judged against it";
        continue;
      }
      Runner faulty{world(), for_sequence(cfg.opt, s), scratch() + "/faulty.ckpt", ckpt(cfg.name, false)};
      faulty.seed = s.seed;
      int64_t fired = 0;
      const SequenceResult r = run_faulty(faulty, s.ops, fault(which), &fired);
      if (fired == 0) continue;  // the fault never changed what the engine did
      ++fired_runs;
      if (!r.oracle.empty()) {
        ++by_oracle;
      } else if (!r.error.empty()) {
        ++by_check;
      } else if (!compare(r, ref).empty()) {
        ++by_parity;
      } else {
        ADD_FAILURE() << "fault " << which << " fired " << fired << " times in " << key
                      << " but went unnoticed: the run passed the oracle, the freshness checks and parity";
      }
      if (which != 2 && r.error.empty()) {
        EXPECT_NE(r.oracle, "") << "fault " << which << " keeps the version bookkeeping consistent and no check "
                                << "refused the run; the oracle must catch it in " << key;
      }
    }
  EXPECT_GT(fired_runs, 0) << "fault " << which << " never fired: the test proves nothing";
  if (world().rank() == 0)
    std::printf("fault %d: fired in %lld runs; caught by the oracle in %lld, by a freshness check in %lld, "
                "by parity alone in %lld\n",
                which, (long long)fired_runs, (long long)by_oracle, (long long)by_check, (long long)by_parity);
}
INSTANTIATE_TEST_SUITE_P(Lifecycle, Faults, ::testing::Values(0, 1, 2));

TEST(Lifecycle, Fp8ComputeReadsAreAllChecked) {
  // FP8 compute: every forward reads each fp8b128 param as W (before its
  // layer) and every backward as W^T; the oracle compared each of them.
  for (const Config& cfg : configs()) {
    if (cfg.opt.compute_dtype != LinearCompute::Fp8) continue;
    for (const Sequence& s : sequences()) {
      const std::string key = cfg.name + "/" + s.name;
      int64_t forwards = 0, backwards = 0, syncs = 0;
      for (char op : s.ops) {
        forwards += op == 'T' ? s.micro_batches : op == 'M' ? 1 : (op == 'E' || op == 'X') ? 2 : 0;
        backwards += op == 'T' ? s.micro_batches : op == 'M' ? 1 : 0;
        syncs += op == 'Y';
      }
      // toy_for(fp8b128): mlp.up.w and mlp.down.w are read as FP8.
      for (const auto* mode : {&clean().dist, &clean().ref})
        EXPECT_EQ(mode->at(key).fp8_checks, 2 * (forwards + backwards + syncs)) << key;
    }
  }
}

// FP8 compute with blocks kept in bf16 (--num-layers-at-start-in-bf16 and
// --num-layers-at-end-in-bf16) on the CPU GPT: three blocks, d_model 192
// (partial tiles), the first and the last block in bf16. Their linear weights
// still travel in fp8b128 and reach the model dequantized, like every other
// param's: the oracle holds them at every read, and the middle block's W and
// W^T at every FP8 read (so the counts say which blocks ran in FP8); sharded
// runs are bitwise reference mode through every lifecycle sequence a to e.
TEST(Lifecycle, GptFp8ComputeWithBf16BlocksAtBothEnds) {
  const GptConfig gpt{.vocab = 64, .padded_vocab = 128, .max_seq = 16, .n_layer = 3, .n_head = 3, .d_model = 192};
  const int64_t n_params = int64_t(gpt_param_specs(gpt).size()), n_fp8 = 4;  // the middle block's four linears
  int compared = 0;
  for (const Config& cfg : configs()) {
    if (cfg.opt.compute_dtype != LinearCompute::Fp8 || !cfg.opt.overlap_param_gather) continue;
    for (const Sequence& s : sequences()) {
      if (s.name[0] > 'e') continue;
      DpOptions o = for_sequence(cfg.opt, s);
      o.bucket_size = 20000;
      o.num_layers_at_start_in_bf16 = 1;
      o.num_layers_at_end_in_bf16 = 1;
      const std::string key = cfg.name + "/" + s.name;
      auto run = [&](const DpOptions& opt, const std::string& tag) {
        const std::string ck = scratch() + "/gpt-bf16-ends-" + tag + ".ckpt";
        Runner r{world(), opt, ck, ck};
        r.seed = s.seed;
        r.make_model = [&gpt] { return std::make_unique<Gpt>(gpt); };
        r.own_fp8 = true;
        return r.run(s.ops);
      };
      const SequenceResult dist = run(o, "dist"), ref = run(o.reference(), "ref");
      int64_t forwards = 0, backwards = 0, syncs = 0;
      for (char op : s.ops) {
        forwards += op == 'T' ? s.micro_batches : op == 'M' ? 1 : (op == 'E' || op == 'X') ? 2 : 0;
        backwards += op == 'T' ? s.micro_batches : op == 'M' ? 1 : 0;
        syncs += op == 'Y';
      }
      for (const SequenceResult* r : {&dist, &ref}) {
        const char* m = r == &dist ? " (sharded)" : " (reference)";
        EXPECT_EQ(r->error, "") << key << m;
        EXPECT_EQ(r->oracle, "") << key << m;
        EXPECT_EQ(r->fp8_checks, n_fp8 * (forwards + backwards + syncs)) << key << m << ": FP8 reads";
        EXPECT_EQ(r->oracle_checks, expected_oracle_checks(s.ops, s.micro_batches, n_params - n_fp8))
            << key << m << ": reads of the dequantized weights the oracle did not see";
      }
      EXPECT_EQ(compare(dist, ref), "") << "dp=" << world().size() << " " << key;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 6);  // fp8b128+fp8+overlap x the sequences a..e
}

TEST(Lifecycle, StaleTransposeIsCaught) {
  // TransformerEngine's stale-transpose bugs (docs/fp8.md), in every FP8
  // compute config and sequence where they change what the engine does:
  // backward's dgrad without a refreshed W^T is refused by the version check;
  // W^T made from W before the unpack but labelled with the new version keeps
  // the bookkeeping consistent, and the oracle must see it: W^T's codes are
  // stale where W's codes are a copy the unpack makes, its tile scales where
  // W's codes are read in place in the payload (buffers.h's Fp8Store; every
  // param at dp 1), which the gather has already refreshed.
  int64_t skipped = 0, previous = 0;
  for (const Config& cfg : configs()) {
    if (cfg.opt.compute_dtype != LinearCompute::Fp8) continue;
    for (const Sequence& s : sequences()) {
      const std::string key = cfg.name + "/" + s.name;
      for (int which : {0, 1}) {
        Runner faulty{world(), for_sequence(cfg.opt, s), scratch() + "/faulty.ckpt", ckpt(cfg.name, false)};
        faulty.seed = s.seed;
        faults::Switches sw;
        sw.skip_transpose_refresh = which == 0;
        sw.transpose_from_previous = which == 1;
        int64_t fired = 0;
        const SequenceResult r = run_faulty(faulty, s.ops, sw, &fired);
        if (fired == 0) continue;
        if (which == 0) {
          ++skipped;
          EXPECT_NE(r.error.find("stale transpose"), std::string::npos) << key << ": " << r.error << r.oracle;
        } else {
          ++previous;
          EXPECT_EQ(r.error, "") << key;
          EXPECT_TRUE(r.oracle.find("transposed FP8 weight codes") != std::string::npos ||
                      r.oracle.find("transposed FP8 weight tile scales") != std::string::npos)
              << key << ": " << r.oracle;
        }
      }
    }
  }
  EXPECT_GT(skipped, 0) << "the skipped refresh never fired: the test proves nothing";
  EXPECT_GT(previous, 0) << "the transpose from the previous version never fired";
}

TEST(Lifecycle, SharedChainBugFailsTheOracleInBothModes) {
  // The same bookkeeping-consistent bug (fault 1: the unpack recorded but not
  // done) in the sharded run AND in its reference: parity compares two equally
  // wrong runs, the oracle fails both. The runs go on past the oracle's
  // finding, to count how often parity alone would have passed. (Five
  // sequences: train/eval, eval first, load + eval, load into a trained
  // engine, sync; the Faults test covers every sequence in the sharded mode.)
  int64_t runs = 0, parity_blind = 0;
  for (const Config& cfg : configs())
    for (const Sequence& s : sequences()) {
      if (std::string("abehj").find(s.name[0]) == std::string::npos) continue;
      const std::string key = cfg.name + "/" + s.name;
      const DpOptions o = for_sequence(cfg.opt, s);
      Runner dist{world(), o, scratch() + "/shared-dist.ckpt", ckpt(cfg.name, false)};
      Runner ref{world(), o.reference(), scratch() + "/shared-ref.ckpt", ckpt(cfg.name, true)};
      dist.seed = ref.seed = s.seed;
      dist.stop_on_oracle = ref.stop_on_oracle = false;
      int64_t fired_d = 0, fired_r = 0;
      const SequenceResult d = run_faulty(dist, s.ops, fault(1), &fired_d);
      const SequenceResult r = run_faulty(ref, s.ops, fault(1), &fired_r);
      EXPECT_GT(fired_d, 0) << key << ": every sequence reads weights after a step or a load";
      EXPECT_GT(fired_r, 0) << key << " (reference)";
      EXPECT_NE(d.oracle, "") << key << ": the oracle missed a skipped unpack";
      EXPECT_NE(r.oracle, "") << key << " (reference): the oracle missed a skipped unpack";
      ++runs;
      if (compare(d, r, /*parity_only=*/true).empty()) ++parity_blind;
    }
  if (world().rank() == 0)
    std::printf("skipped unpack in both modes: the oracle failed all %lld pairs; parity alone passed %lld\n",
                (long long)runs, (long long)parity_blind);
}

TEST(Lifecycle, RankLocalFailureReachesEveryRank) {
  // One rank alone finds something wrong, before collectives the others are
  // about to enter: every rank must stop at the same op with the same report,
  // and the communicator must stay usable (the last run equals the clean one).
  const std::vector<Config> all = configs();  // (a new vector per call)
  const Config cfg = *std::find_if(all.begin(), all.end(), [](const Config& c) { return c.name == "mxfp8"; });
  const Sequence& s = sequences()[0];  // TETETETETETEX
  ASSERT_EQ(cfg.name, "mxfp8");
  ASSERT_EQ(s.ops, "TETETETETETEX");
  const int last = world().size() - 1;
  Runner r{world(), for_sequence(cfg.opt, s), scratch() + "/tamper.ckpt", ""};
  // a) After E1, the last rank's copy of one compute weight moves by one ulp:
  //    its T2 forward reads it (nothing is stale, so nothing is unpacked).
  r.tamper = [&](Model& m, int op) {
    if (op == 1 && world().rank() == last) {
      float* w = static_cast<float*>(m.compute_weights(3));
      w[5] = std::nextafter(w[5], INFINITY);
    }
  };
  SequenceResult a = r.run(s.ops);
  EXPECT_EQ(a.error, "");
  EXPECT_NE(a.oracle.find("[rank " + std::to_string(last) + " of " + std::to_string(world().size()) + "] oracle: T"),
            std::string::npos)
      << a.oracle;
  EXPECT_NE(a.oracle.find("'mlp.down.w'"), std::string::npos) << a.oracle;
  EXPECT_EQ(a.tags, (std::vector<std::string>{"T1", "E1", "T2"})) << "every rank stops after the op that failed";
  // b) The last rank throws between two ops.
  r.tamper = [&](Model&, int op) {
    if (op == 2 && world().rank() == last) MXDP_FAIL("planted error on rank ", last);
  };
  SequenceResult b = r.run(s.ops);
  EXPECT_NE(b.error.find("planted error on rank " + std::to_string(last)), std::string::npos) << b.error;
  EXPECT_EQ(b.tags.size(), 3u);
  // c) Afterwards the ranks still agree on every collective.
  r.tamper = nullptr;
  EXPECT_EQ(compare(r.run(s.ops), clean().dist.at(cfg.name + "/" + s.name)), "");
}

TEST(Lifecycle, CheckpointReshardsAcrossDpSizes) {
  // A checkpoint saved at dp = world size loads on one rank (dp = 1) with the
  // same full masters, saves again byte-identical tensors, and that file loads
  // back at dp = world size and continues exactly like the uninterrupted run.
  // Rank 0's findings reach every rank before the collectives that follow.
  const std::string cfg = "mxfp8+overlap+reuse";
  const std::string at_n = ckpt(cfg, false);
  const std::string at_1 = scratch() + "/resharded.ckpt";
  std::string finding;
  if (world().rank() == 0) {
    try {
      auto self = make_communicator({Backend::Self});
      ToyModel model;
      model.init_weights(99);
      DpOptions o = base_options();
      o.reuse_grad_buf = true;
      DataParallel one(model, *self, o);
      one.load_checkpoint(at_n);
      one.save_checkpoint(at_1, {});
      auto a = read_checkpoint(at_n);
      auto b = read_checkpoint(at_1);
      if (a.params.size() != b.params.size() || a.params.empty()) finding += "different or no params; ";
      if (a.version != b.version) finding += "versions differ; ";
      for (size_t p = 0; p < std::min(a.params.size(), b.params.size()); ++p)
        if (!same_bits(a.params[p].master, b.params[p].master) || !same_bits(a.params[p].m, b.params[p].m) ||
            !same_bits(a.params[p].v, b.params[p].v))
          finding += "param " + std::to_string(p) + " differs after resharding to dp 1; ";
    } catch (const std::exception& e) {
      finding += e.what();
    }
  }
  const std::string all = summarize(gather_strings(world(), finding));
  ASSERT_EQ(all, "");  // the same on every rank: all go on, or none
  for (const Config& c : configs()) {
    if (c.name != cfg) continue;
    Runner r{world(), c.opt, scratch() + "/unused.ckpt", at_1};
    SequenceResult resumed = r.run("LTTTX");
    const SequenceResult& full = clean().dist.at(cfg + "/d_save_at_3_continue");
    ASSERT_EQ(resumed.error, "");
    ASSERT_EQ(resumed.oracle, "");
    ASSERT_EQ(resumed.losses.size(), 4u);
    for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(same_bits(full.losses[3 + i], resumed.losses[i])) << resumed.tags[i];
  }
}

TEST(Lifecycle, StaleReadIsALoudError) {
  // Without a working chain a forward must refuse to run rather than read old weights.
  DpOptions o = base_options();
  o.overlap_param_gather = true;
  Runner r{world(), o, scratch() + "/stale.ckpt", ""};
  int64_t fired = 0;
  SequenceResult res = run_faulty(r, "TETX", fault(2), &fired);
  EXPECT_GT(fired, 0);
  EXPECT_NE(res.error.find("stale weights"), std::string::npos) << res.error;
  // Without overlap the gather runs right after the step and is checked there;
  // an eval consumes a gather only before the first step.
  o.overlap_param_gather = false;
  Runner r2{world(), o, scratch() + "/stale.ckpt", ""};
  res = run_faulty(r2, "ETTX", fault(2), &fired);
  EXPECT_GT(fired, 0);
  EXPECT_NE(res.error.find("stale gather"), std::string::npos) << res.error;
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  world();
  int rc = RUN_ALL_TESTS();
  world().barrier();
  if (world().rank() == 0) std::filesystem::remove_all(scratch());
  return rc;
}

TEST(Lifecycle, MemoryAndTrafficMatchThePlan) {
  // plan_memory() (what `mxdp plan` prints) equals the buffers the engine really
  // holds and the bytes its collectives really moved in a steady-state step.
  std::map<std::string, MemoryPlan> seen;
  for (const Config& c : configs())
    for (const DpOptions& o : {c.opt, c.opt.reference()}) {
      std::unique_ptr<Model> m = toy_for(o.weight_format);
      m->init_weights(1);
      std::vector<bool> fp8(m->params().size(), false);
      if (o.compute_dtype == LinearCompute::Fp8) {  // a wrapper that reads W and W^T (unchecked here)
        fp8 = toy_fp8_linear(m->params(), o);
        m = std::make_unique<OracleModel>(std::move(m), [](int) {}, fp8, [](int, const Fp8Weight&, bool) {});
      }
      DataParallel dp(*m, world(), o);
      for (int s = 0; s < 3; ++s) dp.train_step({make_batch(s, 0, world().rank(), false).batch});
      const MemoryPlan plan = plan_memory(m->params(), dp.layout(), o);
      const MemoryPlan got = dp.allocated();
      EXPECT_EQ(got.master_bytes, plan.master_bytes) << c.name;
      EXPECT_EQ(got.adam_bytes, plan.adam_bytes) << c.name;
      EXPECT_EQ(got.main_grad_bytes, plan.main_grad_bytes) << c.name;
      EXPECT_EQ(got.grad_bytes, plan.grad_bytes) << c.name;
      EXPECT_EQ(got.grad_reduce_bytes, plan.grad_reduce_bytes) << c.name;
      EXPECT_EQ(got.payload_bytes, plan.payload_bytes) << c.name;
      EXPECT_EQ(got.fp8_weight_bytes, plan.fp8_weight_bytes) << c.name;
      // By hand for toy_for(fp8b128)'s FP8 linears mlp.up.w 320x192 and
      // mlp.down.w 192x320 (3 x 2 and 2 x 3 tiles, partial ones included):
      // W^T's codes (1 byte an element) and 2 GEMM-layout scale grids a param
      // (rows padded to 4 scales): 2 x (61440 + 4 * (3 * 4 + 2 * 4)). W's
      // codes are read in place in the payload, except a param whose codes
      // the layout splits into pieces (a shard cut inside it): its own copy.
      int64_t split = 0;
      for (const GatherBuffer& gb : dp.layout().buffers)
        for (const Bucket& b : gb.buckets)
          for (int p : b.params) {
            int pieces = 0;
            for (const std::vector<Piece>& shard : b.shards)
              for (const Piece& pc : shard) pieces += pc.param == p && pc.len > 0;
            if (fp8[p] && pieces > 1) split += m->params()[p].numel();
          }
      // dp 1 cuts no param; at dp 2-4 the toy's shards cut both (so both ways are run).
      if (world().size() == 1) {
        EXPECT_EQ(split, 0) << c.name;
      }
      if (world().size() > 1 && o.compute_dtype == LinearCompute::Fp8) {
        EXPECT_GT(split, 0) << c.name;
      }
      EXPECT_EQ(got.fp8_weight_bytes, o.compute_dtype == LinearCompute::Fp8 ? 2 * 61520 + split : 0) << c.name;
      EXPECT_EQ(got.gather_bytes, plan.gather_bytes) << c.name << (o.distributed_optimizer ? "" : " (reference)");
      EXPECT_EQ(got.reduce_bytes, plan.reduce_bytes) << c.name;
      if (o.distributed_optimizer) seen[c.name] = got;
    }
  const int dp = world().size();
  // Sharding divides the optimizer state; reuse removes the MXFP8 payload buffer.
  ToyModel m;
  Layout L = Layout::build(m.params(), WeightFormat::Mxfp8, 3000, dp);
  EXPECT_EQ(seen["mxfp8"].master_bytes * dp, plan_memory(m.params(), L, base_options().reference()).master_bytes);
  int64_t mxfp8_payload = 0;  // the MXFP8 buffer's gathered payloads, from the layout
  for (const GatherBuffer& gb : L.buffers)
    if (gb.format == WeightFormat::Mxfp8)
      for (const Bucket& b : gb.buckets) mxfp8_payload += dp * payload_shape(gb.format, b.shard_numel).shard_bytes;
  EXPECT_GT(mxfp8_payload, 0);
  EXPECT_EQ(seen["mxfp8+reuse"].payload_bytes, seen["mxfp8"].payload_bytes - mxfp8_payload)
      << "reuse moves the whole MXFP8 payload into the grad buffer";
  EXPECT_EQ(seen["mxfp8+reuse"].grad_bytes, seen["mxfp8"].grad_bytes) << "and the grad buffer does not grow";
  EXPECT_LT(seen["mxfp8+reuse"].payload_bytes, seen["mxfp8"].payload_bytes);
}
