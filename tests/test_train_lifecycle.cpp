// End-to-end lifecycle tests of the `mxdp train` executable under mpirun
// (docs/engine.md, "The parity contract"): the sequences of mpitest_lifecycle.cpp
// (train, eval, save, load, resume, micro-batches, tiny buckets), now driven
// through the CLI on a tiny GPT and real token shards. Each run with the
// sharded optimizer and a low-precision gather (MXFP8 with overlap + grad-buffer
// reuse; NVFP4 with overlap) at dp 2 and 3 must give metrics lines (kind, step,
// pass, loss, lr, grad norm) and final checkpoints (every param's master, m, v)
// BITWISE equal to the same command in reference mode (--distributed-optimizer
// off --overlap-param-gather off --reuse-grad-buf off, same weight format).
// Also: a job resumed from a step-3 checkpoint continues exactly like the
// uninterrupted one, a corrupt checkpoint and an invalid option combination
// exit non-zero with a reason, and nothing hangs (every mpirun runs under
// `timeout`). Some runs end with a sample (after an eval, right after the last
// step, right after a load): the text must be what the same sampler writes
// from a CPU GPT holding the oracle's weights, quant.h's quantize-then-
// dequantize of the run's final fp32 masters (oracle.h). Skips only when
// mpirun is missing.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <sstream>
#include <tuple>
#include <nlohmann/json.hpp>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "io/checkpoint.h"
#include "data/data.h"
#include "models/gpt2/gpt.h"
#include "mpi_session.h"
#include "oracle.h"
#include "train/sample.h"
#include "tmpdir_util.h"
#include "data/utf8.h"

namespace {

namespace fs = std::filesystem;
namespace mt = mxdp::testing;
using nlohmann::json;

#ifndef MXDP_MPIEXEC
#define MXDP_MPIEXEC ""
#endif

// Seconds one mpirun may take before `timeout` kills it: a hang is a failure, not a stuck CI job.
constexpr int kRunTimeoutS = 180;

// The model and schedule every run shares: small enough that a 6-step run with
// an eval after each step takes well under a second of compute per rank.
const char* kCommon =
    "--model tiny --n-layer 2 --d-model 64 --seq-len 32 --batch-size 2 --eval-batches 2 "
    "--sample-tokens 0 --threads 1 --progress lines --log-every 1 --lr 3e-3 --warmup-steps 1 "
    "--comm-timeout 60";

struct Config {
  std::string name, dist, ref;  // flags of the run under test and of its reference
};
const std::vector<Config>& configs() {
  static const std::vector<Config> c = {
      {"mxfp8_overlap_reuse",
       "--weight-format mxfp8 --overlap-param-gather on --reuse-grad-buf on",
       "--weight-format mxfp8 --distributed-optimizer off --overlap-param-gather off --reuse-grad-buf off"},
      {"nvfp4_overlap",
       "--weight-format nvfp4 --overlap-param-gather on --reuse-grad-buf off",
       "--weight-format nvfp4 --distributed-optimizer off --overlap-param-gather off --reuse-grad-buf off"},
  };
  return c;
}

bool have_mpirun() {
  const std::string m = MXDP_MPIEXEC;
  return !m.empty() && ::access(m.c_str(), X_OK) == 0;
}

// ---- running jobs -------------------------------------------------------------

struct Job {
  std::string cmd;  // the shell command line, for failure messages
  mt::RunResult res;
  std::string dir;  // its metrics file and save dir live here
  std::string metrics_path() const { return dir + "/metrics.jsonl"; }
  std::string save_dir() const { return dir + "/ckpt"; }
  std::string ckpt(int64_t step) const { return save_dir() + "/" + fmt_step(step); }
  static std::string fmt_step(int64_t step) {
    char b[32];
    std::snprintf(b, sizeof b, "step_%06lld.ckpt", (long long)step);
    return b;
  }
  // The command and the last part of its output, for failure messages.
  std::string describe() const {
    const size_t keep = 4000;
    const std::string& o = res.output;
    return "\n  command: " + cmd + "\n  exit code: " + std::to_string(res.exit_code) +
           (res.exit_code == 124 || res.exit_code == 137 ? " (killed by timeout: a hang?)" : "") +
           "\n  output" + (o.size() > keep ? " (tail)" : "") + ":\n" +
           (o.size() > keep ? o.substr(o.size() - keep) : o);
  }
};

using mt::quote;

// `mpirun -np np mxdp train <args>` with its own metrics file and save dir under `dir`.
Job mpirun_train(int np, const std::string& args, const std::string& dir) {
  fs::create_directories(dir);
  Job j;
  j.dir = dir;
  const mt::MpiSessionDir session;  // its own Open MPI session directory: jobs run side by side
  j.cmd = session.shell_prefix() + "timeout -k 10 " + std::to_string(kRunTimeoutS) + " " + quote(MXDP_MPIEXEC) +
          " --oversubscribe --bind-to none -np " + std::to_string(np) + " " + quote(MXDP_BINARY) +
          " train " + args + " --metrics " + quote(j.metrics_path()) + " --save-dir " +
          quote(j.save_dir());
  const std::string out = dir + "/output.txt";
  const int status = std::system((j.cmd + " > " + quote(out) + " 2>&1").c_str());
  j.res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  j.res.output = mt::read_file(out);
  return j;
}

// Runs the jobs side by side (they are independent; mpirun start-up is mostly waiting).
std::vector<Job> run_all(const std::vector<std::function<Job()>>& jobs) {
  std::vector<Job> out(jobs.size());
  std::vector<std::thread> th;
  for (size_t i = 0; i < jobs.size(); ++i) th.emplace_back([&, i] { out[i] = jobs[i](); });
  for (auto& t : th) t.join();
  return out;
}

// ---- metrics ------------------------------------------------------------------

struct Line {
  std::string kind;  // train | eval
  int64_t step = 0;
  int pass = 0;                        // eval pass, 0 for train lines
  double loss = 0, lr = 0, grad_norm = 0;  // lr and grad norm: train lines only
  std::string text;
  std::string sig() const {
    return kind + " " + std::to_string(step) + (kind == "eval" ? " p" + std::to_string(pass) : "");
  }
};

// Parses the JSON lines; "" or why it could not.
std::string parse_metrics(const std::string& path, std::vector<Line>& out) {
  std::istringstream in(mt::read_file(path));
  std::string s;
  while (std::getline(in, s)) {
    if (s.empty()) continue;
    Line l;
    l.text = s;
    try {
      json j = json::parse(s);
      l.kind = j.at("kind").get<std::string>();
      if (l.kind == "config") continue;  // the run's options, first line of each run
      l.step = j.at("step").get<int64_t>();
      if (!j.at("loss").is_number()) return path + ": non-numeric loss in: " + s;
      l.loss = j.at("loss").get<double>();
      if (l.kind == "eval") {
        l.pass = j.at("pass").get<int>();
      } else if (l.kind == "train") {
        l.lr = j.at("lr").get<double>();
        if (!j.at("grad_norm").is_number()) return path + ": non-numeric grad_norm in: " + s;
        l.grad_norm = j.at("grad_norm").get<double>();
      } else {
        return path + ": unknown kind in: " + s;
      }
    } catch (const std::exception& e) {
      return path + ": cannot parse '" + s + "': " + e.what();
    }
    out.push_back(l);
  }
  return "";
}

using mt::same_bits;  // oracle.h: bitwise, +0 and -0 told apart

// "" when the lines agree bitwise in kind, step, pass, loss, lr and grad norm.
std::string compare_lines(const std::vector<Line>& a, const std::vector<Line>& b) {
  if (a.size() != b.size())
    return "different number of metrics lines: " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const Line &x = a[i], &y = b[i];
    if (x.sig() != y.sig() || !same_bits(x.loss, y.loss) || !same_bits(x.lr, y.lr) ||
        !same_bits(x.grad_norm, y.grad_norm))
      return "metrics line " + std::to_string(i + 1) + " differs:\n    " + x.text + "\n vs " + y.text;
  }
  return "";
}

std::vector<std::string> sigs(const std::vector<Line>& ls) {
  std::vector<std::string> s;
  for (auto& l : ls) s.push_back(l.sig());
  return s;
}

// ---- checkpoints --------------------------------------------------------------

// "" when both files hold bitwise the same masters, moments, counters and extra.
std::string compare_checkpoints(const std::string& a_path, const std::string& b_path) {
  mxdp::CheckpointData a, b;
  try {
    a = mxdp::read_checkpoint(a_path);
    b = mxdp::read_checkpoint(b_path);
  } catch (const std::exception& e) {
    return e.what();
  }
  if (a.version != b.version || a.iteration != b.iteration)
    return "version/iteration " + std::to_string(a.version) + "/" + std::to_string(a.iteration) +
           " vs " + std::to_string(b.version) + "/" + std::to_string(b.iteration);
  if (a.params.size() != b.params.size()) return "different number of params";
  if (a.params.empty()) return "no params in " + a_path;
  auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  for (size_t p = 0; p < a.params.size(); ++p) {
    const auto &x = a.params[p], &y = b.params[p];
    if (x.name != y.name || x.shape != y.shape) return "param " + std::to_string(p) + " name/shape differ";
    for (auto [what, u, v] : {std::tuple{"master", &x.master, &y.master}, std::tuple{"m", &x.m, &y.m},
                              std::tuple{"v", &x.v, &y.v}})
      if (!same(*u, *v)) return std::string(what) + " of param " + std::to_string(p) + " (" + x.name + ") differs";
  }
  if (a.extra != b.extra) return "extra differs: " + a.extra.dump() + " vs " + b.extra.dump();
  return "";
}

// ---- the sample a run prints at its end -----------------------------------------

// The run's sampling settings, passed explicitly so the oracle knows them.
constexpr int kSampleTokens = 64;
constexpr uint64_t kSampleSeed = 1337;
const char* kSamplePrompt = "And God said";
// `args` (which say --sample-tokens 0, like kCommon) with the sample turned on.
std::string sampling(const std::string& args) {
  const std::string off = "--sample-tokens 0";
  const size_t at = args.find(off);
  MXDP_CHECK(at != std::string::npos, "no '", off, "' in: ", args);
  return args.substr(0, at) + "--sample-tokens " + std::to_string(kSampleTokens) + " --seed " +
         std::to_string(kSampleSeed) + " --sample-prompt '" + kSamplePrompt + "'" + args.substr(at + off.size());
}

// What the sample must read: the trainer samples after sync_weights, so its
// model holds quantize-then-dequantize of the final masters in the run's weight
// format. The same sampler on a CPU GPT given those values (computed by quant.h
// from the final checkpoint, not by the engine) must write the same text.
std::string oracle_sample(const std::string& ckpt_path, mxdp::WeightFormat wf) {
  const mxdp::CheckpointData c = mxdp::read_checkpoint(ckpt_path);
  const json& m = c.extra.at("model");
  mxdp::GptConfig cfg{m.at("vocab"), m.at("padded_vocab"), m.at("max_seq"), m.at("n_layer"), m.at("n_head"),
                      m.at("d_model")};
  mxdp::Gpt model(cfg);
  MXDP_CHECK(c.params.size() == model.params().size(), ckpt_path, ": ", c.params.size(), " params, the GPT has ",
             model.params().size());
  for (size_t p = 0; p < c.params.size(); ++p) {
    const auto w = mt::oracle_dequantized(model.params()[p], c.params[p].master, wf, mxdp::ScaleRounding::RCeil);
    model.set_weights(int(p), w.data());
  }
  // One thread, like the runs (--threads 1): results do not depend on it, but
  // OpenMP teams on a loaded 2-core machine spin for a long time.
  omp_set_num_threads(1);
  mxdp::SampleOptions so;
  so.tokens = kSampleTokens;
  so.seed = kSampleSeed;
  return std::string(kSamplePrompt) + mxdp::generate(model, kSamplePrompt, so);
}

mxdp::WeightFormat format_of(const std::string& flags) {
  return flags.find("--weight-format nvfp4") != std::string::npos ? mxdp::WeightFormat::Nvfp4
                                                                     : mxdp::WeightFormat::Mxfp8;
}

// "" when the job's output holds the sample line the oracle predicts.
std::string check_sample(const std::string& output, const std::string& ckpt_path, mxdp::WeightFormat wf) {
  std::string want;
  try {
    // Printed as the trainer prints text: invalid UTF-8 replaced (utf8.h,
    // itself held to Python's decoder in test_utf8).
    want = mxdp::utf8_replace_invalid(oracle_sample(ckpt_path, wf));
  } catch (const std::exception& e) {
    return std::string("oracle sample: ") + e.what();
  }
  const std::string header = "sample (" + std::to_string(kSampleTokens) + " tokens";
  const size_t at = output.find(header);
  if (at == std::string::npos) return "no '" + header + "' in the output";
  const size_t nl = output.find('\n', at);
  if (nl == std::string::npos || output.compare(nl + 1, want.size() + 1, want + "\n") != 0)
    return "the sample is not what the oracle's weights give:\n  printed: " +
           output.substr(nl == std::string::npos ? at : nl + 1, want.size()) + "\n  oracle:  " + want;
  return "";
}

// ---- fixture ------------------------------------------------------------------

// A fresh directory per test, removed at scope exit. (mt::TempDir names its
// directory after the test, and a parameterized test's name holds '/', which
// would nest directories that it never removes.)
struct ScratchDir {
  std::string path;
  ScratchDir() {
    std::string t = (fs::temp_directory_path() / "mxdp_train_cli_XXXXXX").string();
    if (!::mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed for " + t);
    path = t;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

// A temp dir per test with a small corpus prepared into it (the first 300 KB of
// data/kjv.txt: train.bin 270 KB, val.bin 30 KB), never the source tree.
class TrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_mpirun()) GTEST_SKIP() << "mpirun not found (MXDP_MPIEXEC = '" << MXDP_MPIEXEC << "')";
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    ::setenv("OMP_NUM_THREADS", "1", 0);
    const std::string text = mt::read_file(std::string(MXDP_SOURCE_DIR) + "/data/kjv.txt");
    ASSERT_GT(text.size(), 300000u);
    mt::write_file(tmp / "kjv300k.txt", text.substr(0, 300000));
    mxdp::prepare(tmp / "kjv300k.txt", tmp / "data", 0.1, nullptr);
    common = std::string(kCommon) + " --data " + quote(tmp / "data");
  }
  ScratchDir tmp;
  std::string common;
};

// The run under test and its reference, side by side, same arguments otherwise.
struct Pair {
  Job dist, ref;
  std::vector<Line> dist_lines, ref_lines;
};

// Runs `args` with config c at dp np, in dist and reference mode, and checks:
// both exit 0, their headers show the modes asked for, both metrics files have
// exactly `expect` lines (kind/step/pass), and the two agree bitwise (metrics
// and the final checkpoint at `last_step`).
Pair run_pair(const std::string& dir, const Config& c, int np, const std::string& args,
              const std::vector<std::string>& expect, int64_t last_step,
              const std::string& dist_extra = "", const std::string& ref_extra = "") {
  Pair p;
  auto jobs = run_all({[&] { return mpirun_train(np, args + " " + c.dist + dist_extra, dir + "/dist"); },
                       [&] { return mpirun_train(np, args + " " + c.ref + ref_extra, dir + "/ref"); }});
  p.dist = jobs[0];
  p.ref = jobs[1];
  for (auto [job, lines, mode] : {std::tuple{&p.dist, &p.dist_lines, "on"}, std::tuple{&p.ref, &p.ref_lines, "off"}}) {
    EXPECT_EQ(job->res.exit_code, 0) << job->describe();
    if (job->res.exit_code != 0) continue;
    // Guard: the flags took effect (a run that ignored them would compare a mode with itself).
    EXPECT_TRUE(std::regex_search(job->res.output, std::regex("distributed_optimizer +=\\s+" + std::string(mode) + "\\b")))
        << job->describe();
    const std::string fmt = c.dist.substr(c.dist.find("--weight-format ") + 16, 5);
    EXPECT_TRUE(std::regex_search(job->res.output, std::regex("weight_format +=\\s+" + fmt + "\\b"))) << job->describe();
    const std::string err = parse_metrics(job->metrics_path(), *lines);
    EXPECT_EQ(err, "") << job->describe();
    EXPECT_EQ(sigs(*lines), expect) << "unexpected metrics lines" << job->describe();
  }
  if (::testing::Test::HasFailure()) return p;
  EXPECT_EQ(compare_lines(p.dist_lines, p.ref_lines), "")
      << "dp=" << np << " " << c.name << ": run vs reference" << p.dist.describe() << p.ref.describe();
  EXPECT_EQ(compare_checkpoints(p.dist.ckpt(last_step), p.ref.ckpt(last_step)), "")
      << "dp=" << np << " " << c.name << ": final checkpoints of run vs reference\n  "
      << p.dist.cmd << "\n  " << p.ref.cmd;
  return p;
}

// Guard against comparing nothing: training must move the loss.
void expect_losses_move(const Pair& p) {
  std::vector<double> train;
  for (auto& l : p.dist_lines)
    if (l.kind == "train") train.push_back(l.loss);
  ASSERT_GE(train.size(), 2u) << p.dist.describe();
  EXPECT_FALSE(same_bits(train.front(), train.back())) << "train loss never changed" << p.dist.describe();
}

// Train: "train N"; eval: "eval N pP".
std::string T(int64_t s) { return "train " + std::to_string(s); }
std::string E(int64_t s, int pass = 1) { return "eval " + std::to_string(s) + " p" + std::to_string(pass); }

class TrainLifecycle : public TrainCli, public ::testing::WithParamInterface<std::tuple<int, int>> {
 protected:
  const Config& cfg() const { return configs()[std::get<0>(GetParam())]; }
  int np() const { return std::get<1>(GetParam()); }
  std::string dir(const std::string& name) const { return tmp / name; }
};

// a) 6 steps, eval after each.
// The sample at the end follows an eval.
TEST_P(TrainLifecycle, A_EvalAfterEveryStep) {
  Pair p = run_pair(dir("a"), cfg(), np(), sampling(common) + " --steps 6 --eval-every 1",
                    {T(1), E(1), T(2), E(2), T(3), E(3), T(4), E(4), T(5), E(5), T(6), E(6)}, 6);
  if (HasFailure()) return;
  expect_losses_move(p);
  EXPECT_LT(p.dist_lines[11].loss, p.dist_lines[1].loss) << "eval loss should fall" << p.dist.describe();
  for (const Job* j : {&p.dist, &p.ref})
    EXPECT_EQ(check_sample(j->res.output, j->ckpt(6), format_of(cfg().dist)), "") << j->describe();
}

// b) eval before the first step (the initial weights through the freshness chain).
TEST_P(TrainLifecycle, B_EvalBeforeFirstStep) {
  Pair p = run_pair(dir("b"), cfg(), np(), common + " --steps 3 --eval-first --eval-every 3",
                    {E(0), T(1), T(2), T(3), E(3)}, 3);
  if (HasFailure()) return;
  expect_losses_move(p);
}

// c) two evals in a row between steps: each pass is its own line.
TEST_P(TrainLifecycle, C_TwoEvalsBetweenSteps) {
  Pair p = run_pair(dir("c"), cfg(), np(), common + " --steps 4 --eval-every 2 --eval-passes 2",
                    {T(1), T(2), E(2, 1), E(2, 2), T(3), T(4), E(4, 1), E(4, 2)}, 4);
  if (HasFailure()) return;
  expect_losses_move(p);
  EXPECT_TRUE(same_bits(p.dist_lines[2].loss, p.dist_lines[3].loss)) << p.dist.describe();
}

// d) save at step 3 and continue to 6; a fresh mpirun loads the step-3
// checkpoint and trains to 6: its lines equal the uninterrupted run's from
// step 4 on, and its final checkpoint equals the uninterrupted one.
// e) load, eval first, then train: the eval at step 3 equals the uninterrupted
// run's eval at step 3.
TEST_P(TrainLifecycle, D_SaveAt3ResumeInFreshJob_E_LoadEvalFirst) {
  const std::string sched = common + " --steps 6 --eval-every 3";
  Pair full = run_pair(dir("d"), cfg(), np(), sched + " --save-every 3",
                       {T(1), T(2), T(3), E(3), T(4), T(5), T(6), E(6)}, 6);
  if (HasFailure()) return;
  expect_losses_move(full);
  EXPECT_EQ(compare_checkpoints(full.dist.ckpt(3), full.ref.ckpt(3)), "") << "step-3 checkpoints";
  // Guard: the checkpoint comparison can tell two different states apart.
  EXPECT_NE(compare_checkpoints(full.dist.ckpt(3), full.dist.ckpt(6)), "");
  // Each mode resumes from its own step-3 checkpoint.
  const std::string ld_dist = " --load " + quote(full.dist.ckpt(3)), ld_ref = " --load " + quote(full.ref.ckpt(3));
  Pair resumed = run_pair(dir("d_load"), cfg(), np(), sampling(sched), {T(4), T(5), T(6), E(6)}, 6,
                         ld_dist, ld_ref);
  Pair evalfirst = run_pair(dir("e"), cfg(), np(), sched + " --eval-first", {E(3), T(4), T(5), T(6), E(6)}, 6,
                            ld_dist, ld_ref);
  if (HasFailure()) return;
  const std::vector<Line> tail(full.dist_lines.begin() + 4, full.dist_lines.end());
  EXPECT_EQ(compare_lines(resumed.dist_lines, tail), "")
      << "resumed vs uninterrupted" << resumed.dist.describe() << full.dist.describe();
  EXPECT_EQ(compare_checkpoints(resumed.dist.ckpt(6), full.dist.ckpt(6)), "")
      << "final checkpoint, resumed vs uninterrupted\n  " << resumed.dist.cmd << "\n  " << full.dist.cmd;
  EXPECT_EQ(check_sample(resumed.dist.res.output, resumed.dist.ckpt(6), format_of(cfg().dist)), "")
      << resumed.dist.describe();
  const std::vector<Line> tail_e(full.dist_lines.begin() + 3, full.dist_lines.end());
  EXPECT_EQ(compare_lines(evalfirst.dist_lines, tail_e), "")
      << "load + eval first vs uninterrupted" << evalfirst.dist.describe() << full.dist.describe();
}

// f) three micro-batches per step, an eval between optimizer steps.
TEST_P(TrainLifecycle, F_MicroBatchesEvalBetweenSteps) {
  Pair p = run_pair(dir("f"), cfg(), np(), common + " --steps 3 --eval-every 1 --micro-batches 3",
                    {T(1), E(1), T(2), E(2), T(3), E(3)}, 3);
  if (HasFailure()) return;
  expect_losses_move(p);
}

// g) one-element buckets: every param its own bucket (laid out in backward order).
TEST_P(TrainLifecycle, G_TinyBuckets) {
  Pair p = run_pair(dir("g"), cfg(), np(), common + " --steps 4 --eval-every 2 --bucket-size 1",
                    {T(1), T(2), E(2), T(3), T(4), E(4)}, 4);
  if (HasFailure()) return;
  expect_losses_move(p);
}

// h) No eval at the end: the sample reads what sync_weights made of the last
// step (with overlap, only the first bucket's gather is in flight then). Then
// a job that loads that checkpoint and has no step left samples right after
// the load, again through sync_weights.
// After the load: an eval-only run (--steps not beyond the loaded step needs
// --eval-first), which then samples.
TEST_P(TrainLifecycle, H_SampleRightAfterTheLastStepAndAfterALoad) {
  Pair p = run_pair(dir("h"), cfg(), np(), sampling(common) + " --steps 3 --eval-every 0",
                    {T(1), T(2), T(3)}, 3);
  if (HasFailure()) return;
  for (const Job* j : {&p.dist, &p.ref})
    EXPECT_EQ(check_sample(j->res.output, j->ckpt(3), format_of(cfg().dist)), "") << j->describe();
  const std::string ckpt3 = p.dist.ckpt(3);
  auto jobs = run_all({[&] {
                         return mpirun_train(np(), sampling(common) + " --steps 3 --eval-every 0 --eval-first " +
                                                       cfg().dist + " --load " + quote(ckpt3),
                                             dir("h_load/dist"));
                       },
                       [&] {
                         return mpirun_train(np(), sampling(common) + " --steps 3 --eval-every 0 --eval-first " +
                                                       cfg().ref + " --load " + quote(ckpt3),
                                             dir("h_load/ref"));
                       }});
  for (const Job& j : jobs) {
    ASSERT_EQ(j.res.exit_code, 0) << j.describe();
    std::vector<Line> lines;
    EXPECT_EQ(parse_metrics(j.metrics_path(), lines), "") << j.describe();
    // An eval-only run (nothing left to train): one eval line, no train line.
    ASSERT_EQ(lines.size(), 1u) << j.describe();
    EXPECT_EQ(lines[0].sig(), "eval 3 p1") << "no step was left to train" << j.describe();
    EXPECT_EQ(check_sample(j.res.output, ckpt3, format_of(cfg().dist)), "") << j.describe();
  }
}

INSTANTIATE_TEST_SUITE_P(Cli, TrainLifecycle, ::testing::Combine(::testing::Values(0, 1), ::testing::Values(2, 3)),
                         [](const auto& info) {
                           return configs()[std::get<0>(info.param)].name + "_dp" +
                                  std::to_string(std::get<1>(info.param));
                         });

// ---- failures -----------------------------------------------------------------

// A damaged checkpoint given to --load: every rank exits (non-zero), with the reason, and no hang.
// A checkpoint is a step directory: rank 1's file or the manifest is damaged in a copy of it.
TEST_F(TrainCli, CorruptCheckpointFailsCleanly) {
  Job good = mpirun_train(2, common + " --steps 1 --eval-every 0", tmp / "good");
  ASSERT_EQ(good.res.exit_code, 0) << good.describe();
  const std::string bytes = mt::read_file(good.ckpt(1) + "/rank_00001.bin");
  ASSERT_GT(bytes.size(), 1000u);

  struct Damage {
    std::string name, file, bytes, reason;
  };
  std::string flipped = bytes;
  flipped[bytes.size() - 1000] ^= 0x10;  // inside the tensors
  const std::vector<Damage> damages = {
      {"flipped", "rank_00001.bin", flipped, "checksum mismatch"},
      {"truncated", "rank_00001.bin", bytes.substr(0, bytes.size() - 100), "truncated"},
      {"garbage", "manifest", std::string(64, 'x'), "not an mxdp checkpoint"},
  };
  for (const Damage& d : damages) {
    const std::string path = tmp / (d.name + ".ckpt");
    fs::copy(good.ckpt(1), path);
    mt::write_file(path + "/" + d.file, d.bytes);
    Job j = mpirun_train(2, common + " --steps 2 --load " + quote(path), tmp / ("load_" + d.name));
    EXPECT_NE(j.res.exit_code, 0) << d.name << j.describe();
    EXPECT_NE(j.res.exit_code, 124) << d.name << ": timed out (hang?)" << j.describe();
    EXPECT_TRUE(mt::contains(j.res.output, "mxdp: error:")) << d.name << j.describe();
    EXPECT_TRUE(mt::contains(j.res.output, d.reason)) << d.name << j.describe();
    EXPECT_TRUE(mt::contains(j.res.output, path)) << d.name << ": message should name the file" << j.describe();
  }
}

// Grad-buffer reuse holds the MXFP8 payload: with NVFP4 it is refused at start, with the reason.
TEST_F(TrainCli, InvalidCombinationFailsWithReason) {
  Job j = mpirun_train(2, common + " --steps 2 --weight-format nvfp4 --reuse-grad-buf on", tmp / "nvfp4_reuse");
  EXPECT_NE(j.res.exit_code, 0) << j.describe();
  EXPECT_NE(j.res.exit_code, 124) << "timed out (hang?)" << j.describe();
  EXPECT_TRUE(mt::contains(j.res.output, "reuse_grad_buf")) << j.describe();
  EXPECT_TRUE(mt::contains(j.res.output, "needs weight_format mxfp8, got nvfp4")) << j.describe();
  // Reference mode with overlap asked for: no gather exists to overlap. (Left at
  // its default, auto, overlap follows the distributed optimizer and turns off.)
  Job k = mpirun_train(2, common + " --steps 2 --distributed-optimizer off --overlap-param-gather on --reuse-grad-buf off",
                       tmp / "ref_overlap");
  EXPECT_NE(k.res.exit_code, 0) << k.describe();
  EXPECT_TRUE(mt::contains(k.res.output, "overlap_param_gather needs distributed_optimizer")) << k.describe();
  EXPECT_FALSE(fs::exists(j.metrics_path())) << "no metrics file from a refused run";
}

}  // namespace

namespace {
// The shared settings without the batch size, which these tests vary.
std::string without_batch(const std::string& common) {
  return std::regex_replace(common, std::regex("--batch-size [0-9]+ "), "");
}
std::vector<double> train_losses(const std::vector<Line>& ls) {
  std::vector<double> out;
  for (const Line& l : ls)
    if (l.kind == "train") out.push_back(l.loss);
  return out;
}
// Across dp sizes bitwise equality is not promised (the mean over ranks and the
// gradient average round differently), only agreement within a tolerance. Seen
// on these 6-step runs: at most 3.2e-7 absolute on losses near 5 (6e-8
// relative); 1e-5 leaves room for a quantized weight that flips to a
// neighbouring MXFP8 code, and still catches any real difference in data or math.
constexpr double kDpRelTol = 1e-5;
}  // namespace

TEST_F(TrainCli, DpSizesAgreeWithinTolerance) {
  // The same global batch of 6 sequences as 1x6, 2x3 and 3x2: the data loader
  // gives every dp size the same sequences, so the loss curves must agree.
  const std::string args = without_batch(common) + " --steps 6 --eval-every 6";
  auto jobs = run_all({[&] { return mpirun_train(1, args + " --batch-size 6", tmp / "dp1"); },
                       [&] { return mpirun_train(2, args + " --batch-size 3", tmp / "dp2"); },
                       [&] { return mpirun_train(3, args + " --batch-size 2", tmp / "dp3"); }});
  std::vector<std::vector<Line>> lines(3);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(jobs[i].res.exit_code, 0) << jobs[i].describe();
    ASSERT_EQ(parse_metrics(jobs[i].metrics_path(), lines[i]), "") << jobs[i].describe();
  }
  const auto base = train_losses(lines[0]);
  ASSERT_EQ(base.size(), 6u);
  EXPECT_LT(base.back(), base.front()) << "the loss should fall";
  for (int i = 1; i < 3; ++i) {
    const auto l = train_losses(lines[i]);
    ASSERT_EQ(l.size(), base.size());
    for (size_t s = 0; s < l.size(); ++s)
      EXPECT_NEAR(l[s], base[s], kDpRelTol * base[s]) << "dp " << i + 1 << " vs dp 1, step " << s + 1;
    EXPECT_NEAR(lines[i].back().loss, lines[0].back().loss, kDpRelTol * lines[0].back().loss) << "final eval";
  }
}

TEST_F(TrainCli, ResumeAtAnotherDpSize) {
  // Saved by 2 ranks x 3 sequences, resumed by 3 ranks x 2: the weights reshard
  // and the data continues where it stopped (the global batch is the same).
  const std::string args = without_batch(common) + " --steps 6 --eval-every 6";
  Job two = mpirun_train(2, args + " --batch-size 3 --save-every 3", tmp / "two");
  ASSERT_EQ(two.res.exit_code, 0) << two.describe();
  Job three = mpirun_train(3, args + " --batch-size 2 --eval-first --load " + quote(two.ckpt(3)), tmp / "three");
  ASSERT_EQ(three.res.exit_code, 0) << three.describe();
  std::vector<Line> a, b;
  ASSERT_EQ(parse_metrics(two.metrics_path(), a), "");
  ASSERT_EQ(parse_metrics(three.metrics_path(), b), "");
  const auto la = train_losses(a), lb = train_losses(b);
  ASSERT_EQ(la.size(), 6u);
  ASSERT_EQ(lb.size(), 3u) << three.describe();
  for (size_t s = 0; s < 3; ++s)
    EXPECT_NEAR(lb[s], la[3 + s], kDpRelTol * la[3 + s]) << "step " << s + 4 << three.describe();
  // A different dp size would be refused if the global batch changed.
  Job bad = mpirun_train(3, args + " --batch-size 3 --load " + quote(two.ckpt(3)), tmp / "bad");
  EXPECT_NE(bad.res.exit_code, 0) << bad.describe();
  EXPECT_TRUE(mt::contains(bad.res.output, "global")) << bad.describe();
}

// The Llama family through the same engine: llama-tiny (GQA, RoPE, SwiGLU,
// RMSNorm; shrunk by the same flags) in every mode of configs() at dp 2 and 3,
// bitwise equal to its reference run, then saved at step 2 and resumed at
// another dp size (within kDpRelTol, as for GPT-2 above).
std::string llama_common(const std::string& common) {
  const std::string from = "--model tiny ";
  std::string s = common;
  s.replace(s.find(from), from.size(), "--model llama-tiny ");
  return s;
}

TEST_F(TrainCli, LlamaTinyBitwiseEqualToReferenceInEveryMode) {
  const std::string args = llama_common(common) + " --steps 4 --eval-every 2";
  for (const Config& c : configs())
    for (int np : {2, 3}) {
      Pair p = run_pair(tmp / ("llama_" + c.name + std::to_string(np)), c, np, args, {T(1), T(2), E(2), T(3), T(4), E(4)},
                        4);
      if (HasFailure()) return;
      EXPECT_TRUE(mt::contains(p.dist.res.output, "n_kv_head 2")) << p.dist.describe();
      expect_losses_move(p);
    }
}

TEST_F(TrainCli, LlamaTinyResumesAtAnotherDpSize) {
  const std::string args = without_batch(llama_common(common)) + " --steps 4 --eval-every 4";
  Job two = mpirun_train(2, args + " --batch-size 3 --save-every 2", tmp / "two");
  ASSERT_EQ(two.res.exit_code, 0) << two.describe();
  Job three = mpirun_train(3, args + " --batch-size 2 --load " + quote(two.ckpt(2)), tmp / "three");
  ASSERT_EQ(three.res.exit_code, 0) << three.describe();
  std::vector<Line> a, b;
  ASSERT_EQ(parse_metrics(two.metrics_path(), a), "");
  ASSERT_EQ(parse_metrics(three.metrics_path(), b), "");
  const auto la = train_losses(a), lb = train_losses(b);
  ASSERT_EQ(la.size(), 4u);
  ASSERT_EQ(lb.size(), 2u) << three.describe();
  for (size_t s = 0; s < 2; ++s)
    EXPECT_NEAR(lb[s], la[2 + s], kDpRelTol * la[2 + s]) << "step " << s + 3 << three.describe();
}
