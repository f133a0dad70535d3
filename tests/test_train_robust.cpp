// `mxdp train` as a careless user and as an adversary would run it (issue 12):
// a full disk under --metrics, a data file beside another of the same stem or
// changed in place, a resumed run with another --steps or schedule, nothing to
// train, a diverging run, stale temporaries of interrupted saves and
// --keep-last, --backend self under mpirun, `mxdp plan`'s bucket size. Every
// run is one short job on a tiny GPT; the expectations are computed here from
// the options, never read back from the code under test.
#include <gtest/gtest.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "data/data.h"
#include "train/schedule.h"
#include "tiny_train_fixture.h"
#include "tmpdir_util.h"

namespace {

namespace fs = std::filesystem;
namespace mt = mxdp::testing;
using mt::quote;
using nlohmann::json;



// A tiny model and short runs: each job takes well under a second of compute.
const char* kTiny =
    "--model tiny --n-layer 1 --d-model 32 --seq-len 16 --batch-size 2 --eval-batches 1 --sample-tokens 0 "
    "--threads 1 --progress lines --log-every 1";

class TrainRobust : public mt::TinyTrainTest {
 protected:
  TrainRobust() : TinyTrainTest(kTiny) {}
};

struct Metric {
  std::string kind;
  int64_t step = 0;
  double lr = 0;
  json line;
};
std::vector<Metric> metrics(const std::string& path) {
  std::vector<Metric> out;
  std::istringstream in(mt::read_file(path));
  std::string s;
  while (std::getline(in, s)) {
    json j = json::parse(s);
    Metric m;
    m.kind = j.at("kind");
    m.step = j.value("step", int64_t(-1));
    if (m.kind == "train") m.lr = j.at("lr");
    m.line = j;
    out.push_back(m);
  }
  return out;
}

std::string latest_of(const std::string& save_dir) {
  std::ifstream f(save_dir + "/latest");
  std::string name;
  std::getline(f, name);
  return name;
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> v;
  for (auto& e : fs::directory_iterator(dir)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

// Point 1: a metrics file that cannot be written stops the run with the path
// and the reason, and a non-zero exit (/dev/full fails every write with ENOSPC).
TEST_F(TrainRobust, MetricsWriteFailureStopsTheRun) {
  auto r = train("--steps 3 --eval-every 0 --metrics /dev/full", "full.log");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(mt::contains(r.output, "/dev/full")) << r.output;
  EXPECT_TRUE(mt::contains(r.output, "No space left on device")) << r.output;
  EXPECT_FALSE(mt::contains(r.output, "done:")) << "the run must not report success\n" << r.output;
}

// Point 2: a text file is prepared into a directory keyed by what it was made
// from; another file of the same stem, or the same file changed in place (even
// with an older modification time), is prepared again, never mistaken.
TEST_F(TrainRobust, PreparedDataIsKeyedBySource) {
  auto data_dir = [](const std::string& out) {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(out, m, std::regex("data += (\\S+) \\(train (\\d+) tokens"))) << out;
    return m.size() > 1 ? m[1].str() : std::string();
  };
  auto train_tokens_are = [](const std::string& dir, const std::string& text) {
    mxdp::TokenDataset ds((fs::path(dir) / "train.bin").string());
    const size_t n_train = text.size() - size_t(std::floor(0.1 * double(text.size())));
    if (ds.size() != n_train) return false;
    for (size_t i = 0; i < n_train; ++i)
      if (ds.tokens()[i] != uint16_t(static_cast<unsigned char>(text[i]))) return false;
    return true;
  };
  std::string a, b;
  for (int i = 0; i < 200; ++i) a += "alpha text, line " + std::to_string(i) + "\n";
  for (int i = 0; i < 150; ++i) b += "BETA: another corpus " + std::to_string(i * 7) + "\n";
  mt::write_file(d / "other.txt", a);
  mt::write_file(d / "other.md", b);
  const std::string run = std::string(kTiny) + " --steps 1 --eval-every 0 --data ";
  auto ra = mt::run_mxdp("train " + run + quote(d / "other.txt"), d / "a.log");
  ASSERT_EQ(ra.exit_code, 0) << ra.output;
  const std::string dir_a = data_dir(ra.output);
  EXPECT_TRUE(train_tokens_are(dir_a, a)) << dir_a;
  auto rb = mt::run_mxdp("train " + run + quote(d / "other.md"), d / "b.log");
  ASSERT_EQ(rb.exit_code, 0) << rb.output;
  const std::string dir_b = data_dir(rb.output);
  EXPECT_TRUE(train_tokens_are(dir_b, b)) << "other.md trained on another file's tokens: " << dir_b;
  EXPECT_TRUE(train_tokens_are(dir_a, a)) << "preparing other.md overwrote other.txt's shards";
  // other.txt rewritten in place: same size, other bytes, an old modification time.
  std::string a2 = a;
  for (char& c : a2)
    if (c == 'a') c = 'A';
  ASSERT_EQ(a2.size(), a.size());
  mt::write_file(d / "other.txt", a2);
  const struct timeval old[2] = {{1000000000, 0}, {1000000000, 0}};
  ASSERT_EQ(::utimes((d / "other.txt").c_str(), old), 0);
  auto rc = mt::run_mxdp("train " + run + quote(d / "other.txt"), d / "c.log");
  ASSERT_EQ(rc.exit_code, 0) << rc.output;
  EXPECT_TRUE(train_tokens_are(data_dir(rc.output), a2)) << "a changed file was not prepared again\n" << rc.output;
  // Unchanged: not prepared again.
  auto rd = mt::run_mxdp("train " + run + quote(d / "other.txt"), d / "d.log");
  ASSERT_EQ(rd.exit_code, 0) << rd.output;
  EXPECT_FALSE(mt::contains(rd.output, "preparing")) << rd.output;
}

// Point 3: the checkpoint carries the schedule. A resumed run with a longer
// --steps continues the checkpoint's schedule (here: past its decay end, at
// min_lr) and says so; a schedule option that contradicts the checkpoint is
// refused unless --override-schedule, which then applies it and says so.
TEST_F(TrainRobust, ResumeContinuesTheCheckpointSchedule) {
  const double lr = 3e-3, min_lr = 3e-4;
  const std::string sched = " --lr 3e-3 --min-lr 3e-4 --warmup-steps 1 --eval-every 0";
  auto first = train("--steps 4 --save-dir " + quote(d / "ck") + sched + " --metrics " + quote(d / "m1.jsonl"), "first.log");
  ASSERT_EQ(first.exit_code, 0) << first.output;

  auto longer = train("--steps 7 --load " + quote(d / "ck") + sched + " --metrics " + quote(d / "m2.jsonl"), "longer.log");
  ASSERT_EQ(longer.exit_code, 0) << longer.output;
  EXPECT_TRUE(std::regex_search(longer.output, std::regex("schedule += .*checkpoint"))) << longer.output;
  int seen = 0;
  for (const Metric& m : metrics(d / "m2.jsonl")) {
    if (m.kind == "config") {
      ASSERT_TRUE(m.line.contains("schedule")) << m.line.dump();
      EXPECT_EQ(m.line["schedule"].value("source", ""), "checkpoint") << m.line.dump();
      EXPECT_EQ(m.line["schedule"].value("lr_decay_steps", -1), 4) << m.line.dump();
    }
    if (m.kind != "train") continue;
    ++seen;
    EXPECT_EQ(m.lr, min_lr) << "step " << m.step << ": the checkpoint's cosine ended at step 4";
  }
  EXPECT_EQ(seen, 3);

  auto contradicts = train("--steps 7 --lr-decay-steps 7 --load " + quote(d / "ck") + sched, "contra.log");
  EXPECT_NE(contradicts.exit_code, 0) << contradicts.output;
  EXPECT_TRUE(mt::contains(contradicts.output, "lr_decay_steps")) << contradicts.output;
  EXPECT_TRUE(mt::contains(contradicts.output, "--override-schedule")) << contradicts.output;

  auto over = train("--steps 7 --lr-decay-steps 7 --override-schedule --load " + quote(d / "ck") + sched +
                        " --metrics " + quote(d / "m3.jsonl"),
                    "override.log");
  ASSERT_EQ(over.exit_code, 0) << over.output;
  EXPECT_TRUE(std::regex_search(over.output, std::regex("schedule += .*override"))) << over.output;
  for (const Metric& m : metrics(d / "m3.jsonl")) {
    if (m.kind != "train") continue;
    const double it = double(m.step - 1), progress = (it - 1) / (7.0 - 1);  // warmup 1, decay ends at 7
    const double want = it >= 7 ? min_lr : min_lr + 0.5 * (1 + std::cos(M_PI * progress)) * (lr - min_lr);
    EXPECT_NEAR(m.lr, want, 1e-12) << "step " << m.step;
  }
}

// Issue 21, item 8: a run that ends inside the warmup fixes no decay end, so a
// longer resumed run follows the default rule (the cosine ends at its own
// --steps) instead of holding the peak lr. Expected lrs from the formula here.
TEST_F(TrainRobust, RunInsideTheWarmupLeavesTheDecayToTheResumedRun) {
  const double lr = 3e-3, min_lr = 3e-4;
  const std::string sched = " --lr 3e-3 --min-lr 3e-4 --warmup-steps 4 --eval-every 0";
  auto first = train("--steps 3 --save-dir " + quote(d / "ck") + sched + " --metrics " + quote(d / "w1.jsonl"), "w1.log");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  for (const Metric& m : metrics(d / "w1.jsonl"))
    if (m.kind == "config") {
      EXPECT_EQ(m.line["schedule"].value("lr_decay_steps", 0), -1) << m.line.dump();
    }
  auto longer = train("--steps 10 --load " + quote(d / "ck") + sched + " --metrics " + quote(d / "w2.jsonl"), "w2.log");
  ASSERT_EQ(longer.exit_code, 0) << longer.output;
  int seen = 0;
  for (const Metric& m : metrics(d / "w2.jsonl")) {
    if (m.kind == "config") {
      EXPECT_EQ(m.line["schedule"].value("lr_decay_steps", 0), 10) << m.line.dump();
    }
    if (m.kind != "train") continue;
    ++seen;
    const double it = double(m.step - 1);  // 0-based
    const double want = it < 4 ? lr * (it + 1) / 4 : min_lr + 0.5 * (1 + std::cos(M_PI * (it - 4) / (10.0 - 4))) * (lr - min_lr);
    EXPECT_NEAR(m.lr, want, 1e-12) << "step " << m.step;
  }
  EXPECT_EQ(seen, 7);
}

// Point 3: --steps 0, or --steps at or below the loaded step, says plainly that
// there is nothing to train; with --eval-first it is an eval-only run.
TEST_F(TrainRobust, NothingToTrainIsSaidPlainly) {
  auto zero = train("--steps 0", "zero.log");
  EXPECT_NE(zero.exit_code, 0) << zero.output;
  EXPECT_TRUE(mt::contains(zero.output, "nothing to train")) << zero.output;

  auto eval_only = train("--steps 0 --eval-first --metrics " + quote(d / "e0.jsonl"), "eval0.log");
  ASSERT_EQ(eval_only.exit_code, 0) << eval_only.output;
  EXPECT_TRUE(mt::contains(eval_only.output, "trains nothing")) << eval_only.output;
  int evals = 0, trains = 0;
  for (const Metric& m : metrics(d / "e0.jsonl")) evals += m.kind == "eval", trains += m.kind == "train";
  EXPECT_EQ(evals, 1);
  EXPECT_EQ(trains, 0);

  auto first = train("--steps 3 --eval-every 0 --save-dir " + quote(d / "ck"), "first.log");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  for (const char* steps : {"3", "2"}) {
    auto r = train(std::string("--steps ") + steps + " --load " + quote(d / "ck"), std::string("at") + steps + ".log");
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_TRUE(mt::contains(r.output, "nothing to train")) << r.output;
    EXPECT_TRUE(mt::contains(r.output, "step 3")) << r.output;
  }
  auto eval_ck = train("--steps 3 --eval-first --load " + quote(d / "ck") + " --metrics " + quote(d / "e3.jsonl"), "e3.log");
  ASSERT_EQ(eval_ck.exit_code, 0) << eval_ck.output;
  EXPECT_TRUE(mt::contains(eval_ck.output, "trains nothing")) << eval_ck.output;
  std::vector<int64_t> eval_steps;
  for (const Metric& m : metrics(d / "e3.jsonl"))
    if (m.kind == "eval") eval_steps.push_back(m.step);
  EXPECT_EQ(eval_steps, std::vector<int64_t>{3});
}

// A val.bin of another tokenizer than train.bin's (here GPT-2's 50257 ids
// beside the bytes) is refused before the first step, as a train.bin the model
// cannot read is, even where the model's vocabulary holds both; a run that
// never evaluates scores nothing on val.bin and is not refused.
TEST_F(TrainRobust, ValidationDataOfAnotherTokenizerIsRefused) {
  const std::vector<uint16_t> gpt2_ids(4000, 198);  // every id < 256: only the header tells them apart
  mxdp::write_shard(d / "data/val.bin", gpt2_ids, 50257);
  const std::string want = "is 50257 but the training data's ('" + d / "data/train.bin" + "') is 256";
  for (const std::string vocab : {"", " --vocab 50304"}) {
    auto r = train("--steps 2 --eval-every 1" + vocab, "val_vocab.log");
    EXPECT_NE(r.exit_code, 0) << vocab << "\n" << r.output;
    EXPECT_TRUE(mt::contains(r.output, "the validation data's ('" + d / "data/val.bin" + "') vocab")) << r.output;
    EXPECT_TRUE(mt::contains(r.output, want)) << r.output;
    EXPECT_FALSE(mt::contains(r.output, "done:")) << r.output;
  }
  auto no_eval = train("--steps 2 --eval-every 0", "no_eval.log");
  EXPECT_EQ(no_eval.exit_code, 0) << no_eval.output;
}

// FP8 compute for a model whose linear weights do not fit the FP8 GEMMs (a
// Llama of 16 heads of 2, whose qkv.w is 40 x 32) is refused among the
// options, naming the weight, before anything is written: the text file --data
// names is not prepared (no <file>.mxdp/ beside it), no --save-dir is made.
TEST_F(TrainRobust, Fp8ComputeRefusedBeforeAnythingIsWritten) {
  // (GPT-2 has an FP8 path at every width, tiny's d_model 64 included.)
  for (auto [model, want] : {std::pair{"llama-tiny --d-model 32 --n-head 16", "h0.qkv.w is [40, 32]"}}) {
    const auto r = mt::run_mxdp(std::string("train --model ") + model + " --seq-len 16 --batch-size 2 --steps 2 " +
                                    "--weight-format fp8b128 --compute-dtype fp8 --data " + quote(d / "corpus.txt") +
                                    " --save-dir " + quote(d / "fp8_ckpt"),
                                d / "fp8.log");
    EXPECT_NE(r.exit_code, 0) << model << "\n" << r.output;
    EXPECT_TRUE(mt::contains(r.output, want)) << model << "\n" << r.output;
    EXPECT_FALSE(mt::contains(r.output, "prepare:")) << model << "\n" << r.output;
    EXPECT_FALSE(fs::exists(d / "corpus.txt.mxdp")) << model;
    EXPECT_FALSE(fs::exists(d / "fp8_ckpt")) << model;
  }
}

// --num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16: refused among
// the options (before anything is prepared) without FP8 compute, and when they
// leave no block in FP8; a run that keeps one block at each end in bf16 says
// so in its header and its metrics' config line.
TEST_F(TrainRobust, Bf16BlocksOfFp8Compute) {
  const std::string base = "train --model tiny --n-layer 3 --seq-len 16 --batch-size 2 --eval-batches 1 --threads 1 "
                           "--progress lines --steps 1 --eval-every 0 --data " +
                           quote(d / "corpus.txt");
  const std::string fp8 = " --weight-format fp8b128 --compute-dtype fp8";
  const std::pair<std::string, std::string> refused[] = {
      {" --num-layers-at-start-in-bf16 1", "they need compute_dtype fp8 (--compute-dtype fp8)"},
      {fp8 + " --num-layers-at-start-in-bf16 2 --num-layers-at-end-in-bf16 1",
       "--num-layers-at-start-in-bf16 2 and --num-layers-at-end-in-bf16 1 leave none of tiny's 3 blocks in FP8"},
  };
  for (const auto& [extra, want] : refused) {
    const auto r = mt::run_mxdp(base + extra, d / "refused.log");
    EXPECT_NE(r.exit_code, 0) << extra << "\n" << r.output;
    EXPECT_TRUE(mt::contains(r.output, want)) << extra << "\n" << r.output;
    EXPECT_FALSE(fs::exists(d / "corpus.txt.mxdp")) << extra;
  }
  const auto ok = mt::run_mxdp(base + fp8 + " --num-layers-at-start-in-bf16 1 --num-layers-at-end-in-bf16 1 " +
                                   "--sample-tokens 3 --metrics " + quote(d / "m.jsonl"),
                               d / "ok.log");
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_TRUE(mt::contains(ok.output, "sample (3 tokens")) << ok.output;  // inference on both kinds of block
  EXPECT_TRUE(std::regex_search(ok.output, std::regex(R"(num_layers_at_start_in_bf16 += 1\n)"))) << ok.output;
  EXPECT_TRUE(std::regex_search(ok.output, std::regex(R"(num_layers_at_end_in_bf16 += 1\n)"))) << ok.output;
  const json opts = json::parse(mt::read_file(d / "m.jsonl").substr(0, mt::read_file(d / "m.jsonl").find('\n')))["options"];
  EXPECT_EQ(opts.value("num_layers_at_start_in_bf16", ""), "1") << opts.dump();
  EXPECT_EQ(opts.value("num_layers_at_end_in_bf16", ""), "1") << opts.dump();
  // `mxdp plan` counts W and W^T only for the blocks in FP8: 4 linears a block.
  for (auto [extra, want] : {std::pair{"", "of the 12 linear weights"},
                             std::pair{" --num-layers-at-start-in-bf16 1 --num-layers-at-end-in-bf16 1",
                                       "of the 4 linear weights"}}) {
    const auto plan = mt::run_mxdp(std::string("plan --model tiny --n-layer 3 --dp 2 --compute-dtype fp8") + extra,
                                   d / "plan.log");
    EXPECT_EQ(plan.exit_code, 0) << plan.output;
    EXPECT_TRUE(mt::contains(plan.output, want)) << extra << "\n" << plan.output;
  }
}

// Point 4: a run whose every step is skipped stops after --max-skipped-steps
// in a row with an error; a checkpoint of non-finite masters is never written,
// so `latest` keeps naming the last good one.
TEST_F(TrainRobust, DivergedRunStopsAndKeepsLatest) {
  const std::string ck = d / "ck";
  auto good = train("--steps 2 --eval-every 0 --save-dir " + quote(ck), "good.log");
  ASSERT_EQ(good.exit_code, 0) << good.output;
  ASSERT_EQ(latest_of(ck), "step_000002.ckpt");

  // A constant lr of 3e38: AdamW's step size lr / (1 - beta1^t) overflows to
  // Inf, so the masters become non-finite at step 3.
  const std::string constant = " --min-lr 0 --warmup-steps 0 --lr-decay-steps 0 --override-schedule";
  auto nan = train("--steps 6 --eval-every 0 --save-every 1 --lr 3e38" + constant + " --load " + quote(ck) +
                       " --save-dir " + quote(ck),
                   "nan.log");
  EXPECT_NE(nan.exit_code, 0) << nan.output;
  EXPECT_TRUE(mt::contains(nan.output, "not finite")) << nan.output;
  EXPECT_EQ(latest_of(ck), "step_000002.ckpt") << nan.output;
  EXPECT_FALSE(fs::exists(ck + "/step_000003.ckpt")) << "a checkpoint of non-finite masters was written";

  // lr 1e30: finite but huge masters after step 3; every later forward is
  // non-finite, so every later step is skipped.
  auto skip = train("--steps 20 --eval-every 0 --lr 1e30" + constant + " --max-skipped-steps 3 --load " +
                        quote(ck) + " --metrics " + quote(d / "skip.jsonl"),
                    "skip.log");
  EXPECT_NE(skip.exit_code, 0) << skip.output;
  EXPECT_TRUE(mt::contains(skip.output, "diverged")) << skip.output;
  EXPECT_TRUE(mt::contains(skip.output, "3 consecutive")) << skip.output;
  int64_t last = 0, skipped = 0;
  for (const Metric& m : metrics(d / "skip.jsonl"))
    if (m.kind == "train") last = m.step, skipped += m.line.value("skipped", false);
  EXPECT_EQ(skipped, 3);
  EXPECT_EQ(last, 6) << "steps 4, 5, 6 skipped: the run stops there";

  // The default stops a diverged run too (no --max-skipped-steps given).
  auto dflt = train("--steps 40 --eval-every 0 --lr 1e30" + constant + " --load " + quote(ck), "dflt.log");
  EXPECT_NE(dflt.exit_code, 0) << dflt.output;
  EXPECT_TRUE(mt::contains(dflt.output, "diverged")) << dflt.output;
}

// Point 5: temporaries left by interrupted saves are removed (and reported);
// --keep-last N keeps only the newest N checkpoints; nothing else is touched.
TEST_F(TrainRobust, StaleTemporariesRemovedAndKeepLast) {
  const std::string ck = d / "ck";
  fs::create_directories(ck + "/step_000009.ckpt.tmp.999");
  mt::write_file(ck + "/step_000009.ckpt.tmp.999/rank_00000.bin", std::string(1000, 'x'));
  mt::write_file(ck + "/step_000007.ckpt.tmp.12345", std::string(1000, 'y'));  // a single-file save's temporary
  mt::write_file(ck + "/latest.tmp.4242", "step_000007.ckpt\n");
  mt::write_file(ck + "/notes.txt", "mine\n");
  auto r = train("--steps 4 --eval-every 0 --save-every 1 --keep-last 2 --save-dir " + quote(ck), "keep.log");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(mt::contains(r.output, "step_000009.ckpt.tmp.999")) << "removal should be reported\n" << r.output;
  EXPECT_EQ(entries(ck), (std::vector<std::string>{".mxdp-lock", "latest", "notes.txt", "step_000003.ckpt",
                                                  "step_000004.ckpt"}))
      << r.output;
  EXPECT_EQ(latest_of(ck), "step_000004.ckpt");
}

// Point 8: --backend self under mpirun would run unrelated one-rank jobs.
TEST_F(TrainRobust, BackendSelfWithSeveralRanksIsAnError) {
  const std::string run2 = timed_mpirun_train();
  if (run2.empty()) GTEST_SKIP() << "mpirun not found";
  const std::string cmd = run2 + " --steps 1 --eval-every 0 --backend self > " + quote(d / "self.log") + " 2>&1";
  const int status = std::system(cmd.c_str());
  const std::string out = mt::read_file(d / "self.log");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 124) << out;
  EXPECT_TRUE(mt::contains(out, "--backend self")) << out;
  EXPECT_TRUE(mt::contains(out, "2 ranks")) << out;
}

// Issue 24: the run header's first line names the launcher it found.
TEST_F(TrainRobust, HeaderFirstLineNamesTheLauncher) {
  const std::string run2 = timed_mpirun_train();
  if (run2.empty()) GTEST_SKIP() << "mpirun not found";
  const std::string cmd = run2 + " --steps 1 --eval-every 0 > " + quote(d / "hdr.log") + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << mt::read_file(d / "hdr.log");
  const std::string out = mt::read_file(d / "hdr.log");
  EXPECT_TRUE(out.rfind("mxdp train: 2 ranks started by Open MPI (mpi)", 0) == 0) << out;
  auto alone = train("--steps 1 --eval-every 0", "alone.log");
  ASSERT_EQ(alone.exit_code, 0) << alone.output;
  EXPECT_TRUE(alone.output.rfind("mxdp train: 1 rank (self)", 0) == 0) << alone.output;
}

// Issue 21, item 8: an error is the user's sentence, printed once under
// mpirun (every rank finds a bad option; rank 0 says it), without the source
// location unless --verbose asks for it.
TEST_F(TrainRobust, AnErrorIsOneSentenceOnce) {
  const std::string timed = timed_mpirun_train();
  if (timed.empty()) GTEST_SKIP() << "mpirun not found";
  const auto run2 = [&](const std::string& extra, const std::string& log) {
    const std::string cmd = timed + " --steps -1 " + extra + " > " + quote(d / log) + " 2>&1";
    const int status = std::system(cmd.c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 124);
    return mt::read_file(d / log);
  };
  const auto count = [](const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
  };
  const std::string plain = run2("", "plain.log");
  EXPECT_EQ(count(plain, "mxdp: error: --steps must be >= 0, got -1\n"), 1u) << plain;
  EXPECT_EQ(count(plain, "mxdp: error:"), 1u) << plain;
  EXPECT_FALSE(mt::contains(plain, ".cpp:")) << plain;
  EXPECT_FALSE(mt::contains(plain, "check failed")) << plain;
  const std::string verbose = run2("--verbose", "verbose.log");
  EXPECT_EQ(count(verbose, "mxdp: error: --steps must be >= 0, got -1\n"), 1u) << verbose;
  EXPECT_TRUE(std::regex_search(verbose, std::regex(R"(\(at trainer\.cpp:[0-9]+ \(check failed: cfg_\.steps >= 0\)\))")))
      << verbose;
}

// MXDP_VERBOSE is an on/off switch like mxdp's other MXDP_* variables
// (util/env.h): 1 adds the source location to an error, 0 or unset does not,
// and any other value is itself an error that names the variable.
TEST_F(TrainRobust, MxdpVerboseIsAnOnOffSwitch) {
  const auto with = [&](const char* value, const std::string& log) {
    ::setenv("MXDP_VERBOSE", value, 1);
    auto r = train("--steps -1", log);
    ::unsetenv("MXDP_VERBOSE");
    EXPECT_NE(r.exit_code, 0) << r.output;
    return r.output;
  };
  const std::string on = with("1", "verbose_on.log"), off = with("0", "verbose_off.log");
  EXPECT_TRUE(mt::contains(on, "mxdp: error: --steps must be >= 0, got -1")) << on;
  EXPECT_TRUE(mt::contains(on, "(at trainer.cpp:")) << on;
  EXPECT_TRUE(mt::contains(off, "mxdp: error: --steps must be >= 0, got -1")) << off;
  EXPECT_FALSE(mt::contains(off, ".cpp:")) << off;
  const std::string bad = with("yes", "verbose_bad.log");
  EXPECT_TRUE(mt::contains(bad, "MXDP_VERBOSE must be 0 or 1, got 'yes'")) << bad;
}

// Point 8: `mxdp plan` plans with the bucket size `mxdp train` uses. The
// default is Megatron-Core's (max(40M, 1M x dp) elements: 40M at dp 1 and 2);
// --bucket-size takes a positive count or auto, and says so.
TEST_F(TrainRobust, PlanUsesTrainsBucketSize) {
  auto run = train("--steps 1 --eval-every 0", "train.log");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(run.output, m, std::regex("bucket_size +=? *(\\d+)"))) << run.output;
  EXPECT_EQ(m[1].str(), "40000000") << run.output;
  for (const char* dp : {"1", "2"}) {
    auto plan = mt::run_mxdp(std::string("plan --model tiny --dp ") + dp, d / "plan.log");
    ASSERT_EQ(plan.exit_code, 0) << plan.output;
    EXPECT_TRUE(mt::contains(plan.output, "buckets of " + m[1].str() + " elements")) << plan.output;
  }
  auto plan64 = mt::run_mxdp("plan --model tiny --dp 64 --bucket-size auto", d / "plan64.log");
  EXPECT_TRUE(mt::contains(plan64.output, "buckets of 64000000 elements")) << plan64.output;
  auto given = mt::run_mxdp("plan --model tiny --dp 2 --bucket-size 3000", d / "given.log");
  EXPECT_TRUE(mt::contains(given.output, "buckets of 3000 elements")) << given.output;
  for (const char* bad : {"0", "-5", "1e6", "many"}) {
    auto r = train(std::string("--steps 1 --bucket-size ") + bad, "bad.log");
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_TRUE(mt::contains(r.output, std::string("--bucket-size: a positive number of elements or auto, got '") +
                                           bad + "'"))
        << r.output;
  }
}

// Issue 21, item 9: one default model. `train --help` names it; `plan`
// without --model plans that one.
TEST_F(TrainRobust, PlanAndTrainHaveOneDefaultModel) {
  auto help = mt::run_mxdp("train --help", d / "help.log");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(help.output, m, std::regex("--model TEXT=([a-z0-9.-]+)"))) << help.output;
  auto plan = mt::run_mxdp("plan --dp 2", d / "plan.log");
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_TRUE(mt::contains(plan.output, "mxdp plan: " + m[1].str() + ",")) << plan.output;
}

// Issue 21, item 7: `sample --threads 100000` crashed (exit 139); counts are bounded.
TEST_F(TrainRobust, SampleCountsAreBounded) {
  for (const char* bad : {"--threads 100000", "--threads -1", "--tokens -5", "--tokens 100000000"}) {
    auto r = mt::run_mxdp(std::string("sample --load ") + quote(d / "none") + " " + bad, d / "sample.log");
    EXPECT_NE(r.exit_code, 0) << bad << ": " << r.output;
    EXPECT_LT(r.exit_code, 128) << bad << " crashed: " << r.output;
    EXPECT_TRUE(mt::contains(r.output, std::string(bad).substr(0, std::string(bad).find(' ')))) << bad << ": " << r.output;
  }
}

// The default peak learning rate follows the model's width: GPT-3's rates
// (Brown et al. 2020, table 2.1, typed in here from the paper: d_model and
// peak lr of its eight models), 3e-3 (the tiny models' rate) up to d_model 256.
TEST(DefaultLearningRate, IsGpt3sRateForTheWidth) {
  const std::pair<int, double> gpt3[] = {{768, 6.0e-4},  {1024, 3.0e-4}, {1536, 2.5e-4}, {2048, 2.0e-4},
                                         {2560, 1.6e-4}, {4096, 1.2e-4}, {5140, 1.0e-4}, {12288, 0.6e-4}};
  for (auto [width, lr] : gpt3) EXPECT_DOUBLE_EQ(mxdp::default_peak_lr(width), lr) << "d_model " << width;
  // Between GPT-3's widths: the rate of the next wider one.
  EXPECT_DOUBLE_EQ(mxdp::default_peak_lr(576), 6.0e-4);   // smollm2-135m
  EXPECT_DOUBLE_EQ(mxdp::default_peak_lr(896), 3.0e-4);   // qwen2.5-0.5b
  EXPECT_DOUBLE_EQ(mxdp::default_peak_lr(1280), 2.5e-4);  // gpt2-774m
  EXPECT_DOUBLE_EQ(mxdp::default_peak_lr(1600), 2.0e-4);  // gpt2-1558m
  EXPECT_DOUBLE_EQ(mxdp::default_peak_lr(20000), 0.6e-4);
  for (int small : {1, 32, 64, 256}) EXPECT_DOUBLE_EQ(mxdp::default_peak_lr(small), 3e-3) << small;
  EXPECT_DOUBLE_EQ(mxdp::default_peak_lr(257), 6.0e-4);
  EXPECT_THROW(mxdp::default_peak_lr(0), std::exception);
}

// `mxdp train` without --lr peaks at the width's rate and decays to a tenth of
// it, says so in its header and records it; --lr alone sets the peak and the
// floor follows it; a resumed run without --lr keeps its checkpoint's rate.
TEST_F(TrainRobust, TheDefaultLearningRateFollowsTheWidth) {
  auto schedule_of = [](const std::string& metrics_path) {
    for (const Metric& m : metrics(metrics_path))
      if (m.kind == "config") return m.line.at("schedule");
    return json();
  };
  const std::string data = " --data " + quote(d / "data");
  const std::string wide = "train --model tiny --n-layer 1 --n-head 4 --d-model 768 --vocab 256 --seq-len 8 "
                           "--batch-size 1 --eval-every 0 --sample-tokens 0 --threads 1 --warmup-steps 1 --steps 2";
  auto w = mt::run_mxdp(wide + data + " --metrics " + quote(d / "w.jsonl"), d / "w.log");
  ASSERT_EQ(w.exit_code, 0) << w.output;
  EXPECT_TRUE(mt::contains(w.output, "default for d_model 768")) << w.output;
  json s = schedule_of(d / "w.jsonl");
  EXPECT_EQ(s.value("lr", 0.0), 6e-4) << s.dump();
  EXPECT_EQ(s.value("min_lr", 0.0), 6e-5) << s.dump();
  EXPECT_EQ(s.value("lr_default_for_d_model", 0), 768) << s.dump();
  int steps = 0;
  for (const Metric& m : metrics(d / "w.jsonl")) {
    if (m.kind != "train") continue;
    ++steps;  // step 1 ends the one-step warmup at the peak, step 2 starts the cosine there
    EXPECT_NEAR(m.lr, 6e-4, 1e-18) << "step " << m.step;
  }
  EXPECT_EQ(steps, 2);

  auto tiny = train("--steps 2 --eval-every 0 --save-dir " + quote(d / "ckt") + " --metrics " + quote(d / "t.jsonl"),
                    "t.log");
  ASSERT_EQ(tiny.exit_code, 0) << tiny.output;
  s = schedule_of(d / "t.jsonl");
  // The tiny model's schedule is the one before the default followed the width, to the bit.
  EXPECT_EQ(s.value("lr", 0.0), 3e-3) << s.dump();
  EXPECT_EQ(s.value("min_lr", 0.0), 3e-4) << s.dump();
  EXPECT_EQ(s.value("lr_default_for_d_model", 0), 32) << s.dump();  // kTiny's --d-model
  // Resumed, it continues the checkpoint's schedule and still says where its lr came from.
  auto tiny_on = train("--steps 3 --eval-every 0 --load " + quote(d / "ckt") + " --metrics " + quote(d / "t2.jsonl"),
                       "t2.log");
  ASSERT_EQ(tiny_on.exit_code, 0) << tiny_on.output;
  EXPECT_TRUE(mt::contains(tiny_on.output, "its peak lr was the default for d_model 32")) << tiny_on.output;
  s = schedule_of(d / "t2.jsonl");
  EXPECT_EQ(s.value("source", ""), "checkpoint") << s.dump();
  EXPECT_EQ(s.value("lr_default_for_d_model", 0), 32) << s.dump();

  auto given = train("--steps 2 --eval-every 0 --lr 1e-3 --save-dir " + quote(d / "ck") + " --metrics " +
                         quote(d / "g.jsonl"),
                     "g.log");
  ASSERT_EQ(given.exit_code, 0) << given.output;
  EXPECT_FALSE(mt::contains(given.output, "default for d_model")) << given.output;
  s = schedule_of(d / "g.jsonl");
  EXPECT_EQ(s.value("lr", 0.0), 1e-3) << s.dump();
  EXPECT_EQ(s.value("min_lr", 0.0), 1e-4) << s.dump();
  EXPECT_FALSE(s.contains("lr_default_for_d_model")) << s.dump();

  auto resumed = train("--steps 3 --eval-every 0 --load " + quote(d / "ck") + " --metrics " + quote(d / "r.jsonl"),
                       "r.log");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_FALSE(mt::contains(resumed.output, "default for d_model")) << resumed.output;
  s = schedule_of(d / "r.jsonl");
  EXPECT_EQ(s.value("source", ""), "checkpoint") << s.dump();
  EXPECT_EQ(s.value("lr", 0.0), 1e-3) << s.dump();
  EXPECT_EQ(s.value("min_lr", 0.0), 1e-4) << s.dump();
  EXPECT_FALSE(s.contains("lr_default_for_d_model")) << s.dump();
}

// A checkpoint's schedule records the width its default lr came from, and only
// then; a value that is not a positive integer is refused with the path.
TEST(DefaultLearningRate, CheckpointsRecordTheWidthOfADefaultLr) {
  mxdp::Schedule s;
  s.lr = 6e-4, s.min_lr = 6e-5, s.warmup_steps = 20, s.lr_decay_steps = 100, s.source = "command line";
  EXPECT_FALSE(s.to_json().contains("lr_default_for_d_model"));
  EXPECT_EQ(mxdp::schedule_from(s.to_json(), "ck").lr_default_for_d_model, 0);
  s.lr_default_for_d_model = 768;
  const json j = s.to_json();
  EXPECT_EQ(j.value("lr_default_for_d_model", 0), 768);
  const mxdp::Schedule r = mxdp::schedule_from(j, "ck");
  EXPECT_EQ(r.lr_default_for_d_model, 768);
  EXPECT_EQ(r.lr, 6e-4);
  EXPECT_EQ(r.source, "checkpoint");
  for (const json& bad : {json(-1), json(0), json("768"), json(1.5)}) {
    json b = j;
    b["lr_default_for_d_model"] = bad;
    try {
      mxdp::schedule_from(b, "ckpt/step_000100");
      ADD_FAILURE() << "accepted " << bad.dump();
    } catch (const std::exception& e) {
      EXPECT_TRUE(mt::contains(e.what(), "ckpt/step_000100")) << e.what();
      EXPECT_TRUE(mt::contains(e.what(), "lr_default_for_d_model")) << e.what();
    }
  }
}
