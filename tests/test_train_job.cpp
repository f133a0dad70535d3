// `mxdp train` as a long job (issue 21): a rate and an ETA that are true
// (an injected clock and steps of a known duration), a save directory found
// unusable before the first step, locked against a second job, never replaced
// by a fresh run unless told (--load auto, --start-over), a metrics file cut
// mid-line repaired on resume, options out of range refused, and SIGINT/SIGTERM
// sent to a real `mxdp train` (one rank; one of two ranks under mpirun) stopping
// every rank with a checkpoint that resumes bitwise. The expectations are
// computed here from the options, never read back from the code under test.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "comm/comm.h"
#include "data/data.h"
#include "io/checkpoint.h"
#include "tiny_train_fixture.h"
#include "tmpdir_util.h"
#include "train/throughput.h"
#include "train/trainer.h"

namespace {

namespace fs = std::filesystem;
namespace mt = mxdp::testing;
using mt::quote;
using nlohmann::json;


const char* kTiny =
    "--model tiny --n-layer 1 --d-model 32 --seq-len 16 --batch-size 2 --eval-batches 1 --sample-tokens 0 "
    "--threads 1 --progress lines --log-every 1 --comm-timeout 60";

std::vector<json> lines_of(const std::string& path) {
  std::vector<json> out;
  std::istringstream in(mt::read_file(path));
  std::string s;
  while (std::getline(in, s)) out.push_back(json::parse(s));  // throws on a broken line
  return out;
}

std::vector<json> train_lines(const std::string& path) {
  std::vector<json> t;
  for (json& j : lines_of(path))
    if (j.at("kind") == "train") t.push_back(j);
  return t;
}

std::string latest_of(const std::string& dir) {
  std::ifstream f(dir + "/latest");
  std::string name;
  std::getline(f, name);
  return name;
}

// "" when both checkpoints hold bitwise the same masters and moments.
std::string compare_params(const std::string& a_path, const std::string& b_path) {
  mxdp::CheckpointData a, b;
  try {
    a = mxdp::read_checkpoint(a_path);
    b = mxdp::read_checkpoint(b_path);
  } catch (const std::exception& e) {
    return e.what();
  }
  if (a.iteration != b.iteration) return "iterations differ";
  if (a.params.empty() || a.params.size() != b.params.size()) return "param counts differ (or none)";
  for (size_t p = 0; p < a.params.size(); ++p)
    for (auto [what, u, v] : {std::tuple{"master", &a.params[p].master, &b.params[p].master},
                              std::tuple{"m", &a.params[p].m, &b.params[p].m},
                              std::tuple{"v", &a.params[p].v, &b.params[p].v}})
      if (u->size() != v->size() || std::memcmp(u->data(), v->data(), u->size() * sizeof(float)) != 0)
        return std::string(what) + " of " + a.params[p].name + " differs";
  return "";
}

// A process running `cmd` through the shell (exec'd: its pid is the command's).
struct Spawned {
  pid_t pid = -1;
  Spawned(const std::string& cmd, const std::string& log) {
    const std::string line = "exec " + cmd + " > " + quote(log) + " 2>&1";
    pid = ::fork();
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  // Exit code, -1 when it did not end within `seconds` (then it is killed).
  int wait(double seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    int status = 0;
    while (std::chrono::steady_clock::now() < until) {
      const pid_t r = ::waitpid(pid, &status, WNOHANG);
      if (r == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    pid = -1;
    return -1;
  }
  ~Spawned() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

// Waits until `path` holds at least n train lines (false after 60 s).
bool wait_for_train_lines(const std::string& path, size_t n) {
  for (int i = 0; i < 3000; ++i) {
    std::istringstream in(mt::read_file(path));
    std::string s;
    size_t k = 0;
    while (std::getline(in, s)) k += s.find("\"kind\":\"train\"") != std::string::npos;
    if (k >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

class TrainJob : public mt::TinyTrainTest {
 protected:
  TrainJob() : TinyTrainTest(kTiny) {}
  // kTiny's model and sizes as a TrainConfig, for the tests that call train() in this process.
  mxdp::TrainConfig tiny_in_code() const {
    mxdp::TrainConfig c;
    c.model = "tiny";
    c.n_layer = 1;
    c.d_model = 32;
    c.seq_len = 16;
    c.batch_size = 2;
    c.eval_batches = 1;
    c.sample_tokens = 0;
    c.threads = 1;
    c.progress = "lines";
    c.data = d / "data";
    return c;
  }
  // train(c) in this process on one rank, on a clock that moves only by what
  // span_s(phase, step) says each timed span ("step", "eval", "save") takes:
  // the exit code and what the run printed.
  struct Ran {
    int rc;
    std::string out;
  };
  Ran train_on_clock(mxdp::TrainConfig c, const std::function<double(const std::string&, int64_t)>& span_s) const {
    double t = 1000;
    c.clock = [&] { return t; };
    c.on_phase = [&](const char* phase, int64_t step) { t += span_s(phase, step); };
    auto comm = mxdp::make_communicator({.backend = mxdp::Backend::Self});
    ::testing::internal::CaptureStdout();
    const int rc = mxdp::train(c, *comm);
    return {rc, ::testing::internal::GetCapturedStdout()};
  }
};

}  // namespace

// Item 1: steps of a known duration on an injected clock (0.05 s each; an eval
// takes 0.4 s and a save 0.7 s). Every step's reported rate is the truth, also
// the steps just before and after an eval or a save (once reported as ~1e9
// tokens/s), and the ETA counts the evals and saves still to come at their cost.
TEST_F(TrainJob, RateAndEtaAreTrueAroundEvalsAndSaves) {
  const double step_s = 0.05, eval_s = 0.4, save_s = 0.7;
  const int64_t steps = 12, eval_every = 4, save_every = 6;
  mxdp::TrainConfig c = tiny_in_code();
  c.steps = steps;
  c.eval_every = eval_every;
  c.save_every = save_every;
  c.save_dir = d / "ck";
  c.metrics = d / "m.jsonl";
  const Ran run = train_on_clock(c, [&](const std::string& phase, int64_t) {
    return phase == "step" ? step_s : phase == "eval" ? eval_s : save_s;
  });
  ASSERT_EQ(run.rc, 0) << run.out;

  const double tokens_per_step = 2.0 * 16;  // batch x seq_len x 1 rank x 1 micro-batch
  const std::vector<json> tl = train_lines(d / "m.jsonl");
  ASSERT_EQ(tl.size(), size_t(steps));
  for (const json& j : tl) {
    const int64_t s = j.at("step");
    const double rate = j.at("tokens_per_s");
    EXPECT_NEAR(rate, tokens_per_step / step_s, 0.1 * tokens_per_step / step_s) << "step " << s;
    // Evals at 4, 8, 12 and saves at 6, 12 (hand-listed); those at step s come after its report.
    int evals = 0, saves = 0;
    for (int64_t e : {4, 8, 12}) evals += e >= s;
    for (int64_t e : {6, 12}) saves += e >= s;
    if (s < 7) continue;  // from step 7 on both an eval and a save have been measured
    const double want = double(steps - s) * step_s + evals * eval_s + saves * save_s;
    EXPECT_NEAR(j.at("eta_s").get<double>(), want, 0.1 * want + 1e-9) << "step " << s;
  }
}

// The first step also pays the run's set-up (on a GPU, plans and first
// allocations: 38 steady steps' time in a gpt2-124m run on an H200, whose
// first line said ETA 1h02m for a run of 1m45s). Here it takes 2 s and every
// later step 0.05 s: from step 2 on the ETA is the steady steps' (computed
// here), and the first progress line gives none.
TEST_F(TrainJob, TheFirstStepsSetUpIsNotInTheEta) {
  const double first_s = 2.0, step_s = 0.05;
  const int64_t steps = 6;
  mxdp::TrainConfig c = tiny_in_code();
  c.log_every = 1;
  c.steps = steps;
  c.eval_every = 0;
  c.metrics = d / "m.jsonl";
  const Ran run = train_on_clock(c, [&](const std::string& phase, int64_t step) {
    return phase != "step" ? 0.0 : step == 1 ? first_s : step_s;
  });
  const std::string& out = run.out;
  ASSERT_EQ(run.rc, 0) << out;
  const std::vector<json> tl = train_lines(d / "m.jsonl");
  ASSERT_EQ(tl.size(), size_t(steps));
  EXPECT_NEAR(tl[0].at("step_s").get<double>(), first_s, 1e-9);  // the first step's own time is what it took
  for (size_t i = 1; i < tl.size(); ++i) {
    const int64_t s = tl[i].at("step");
    EXPECT_NEAR(tl[i].at("eta_s").get<double>(), double(steps - s) * step_s, 1e-9) << "step " << s;
  }
  EXPECT_TRUE(std::regex_search(out, std::regex("step +1/6 .*\\| ETA --"))) << out;
  EXPECT_FALSE(std::regex_search(out, std::regex("step +2/6 .*\\| ETA --"))) << out;
}

// MFU: steps of 0.05 s on the injected clock, 32 tokens a step (640 tokens/s),
// on the tiny GPT of n_layer 1, d_model 32, vocab 256 at seq_len 16, whose
// training FLOPs a token are (6 a weight of every matrix product, 6 n_layer
// seq_len d_model for causal attention) 6 (12 * 32^2 + 256 * 32) + 6 * 16 * 32
// = 125952: at a peak of 1e-4 TFLOP/s, MFU 640 * 125952 / 1e8 = 0.8060928.
// Without --peak-tflops no MFU is shown; a negative one is refused.
TEST_F(TrainJob, MfuIsTheModelsFlopsOverThePeak) {
  mxdp::TrainConfig c = tiny_in_code();
  c.steps = 4;
  c.eval_every = 0;
  c.log_every = 1;
  c.peak_tflops = 1e-4;
  c.metrics = d / "m.jsonl";
  const auto steps_of_50ms = [](const std::string& phase, int64_t) { return phase == "step" ? 0.05 : 0.0; };
  const Ran run = train_on_clock(c, steps_of_50ms);
  const std::string& out = run.out;
  ASSERT_EQ(run.rc, 0) << out;
  const std::vector<json> all = lines_of(d / "m.jsonl");
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all[0].at("train_flops_per_token").get<double>(), 125952.0);
  EXPECT_EQ(all[0].at("peak_tflops").get<double>(), 1e-4);
  const std::vector<json> tl = train_lines(d / "m.jsonl");
  ASSERT_EQ(tl.size(), 4u);
  for (const json& j : tl) EXPECT_NEAR(j.at("mfu").get<double>(), 0.8060928, 1e-6) << j.dump();
  EXPECT_TRUE(std::regex_search(out, std::regex("step +4/4 .*\\| 640 tok/s \\| MFU 80\\.6% \\| ETA"))) << out;
  EXPECT_TRUE(mt::contains(out, "126 kFLOP a trained token at seq_len 16")) << out;

  c.peak_tflops = 0;
  c.metrics = d / "m0.jsonl";
  const Ran run0 = train_on_clock(c, steps_of_50ms);
  const std::string& out0 = run0.out;
  ASSERT_EQ(run0.rc, 0) << out0;
  EXPECT_FALSE(mt::contains(out0, "MFU")) << out0;
  for (const json& j : train_lines(d / "m0.jsonl")) EXPECT_FALSE(j.contains("mfu")) << j.dump();

  auto r = train("--steps 1 --eval-every 0 --peak-tflops -1", "neg.log");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(mt::contains(r.output, "--peak-tflops must be >= 0")) << r.output;
}

// The peak a GPU's MFU is measured against when --peak-tflops is not given, by
// the names the CUDA driver reports, against half the "with sparsity" bf16
// figure of NVIDIA's datasheets (H100 SXM and H200 1979, H100 NVL and H200 NVL
// 1671, H100 PCIe 1513; A100 624): the NVL and PCIe forms are not taken for the
// SXM one whose name they contain; another GPU, or none, has no peak.
TEST(Throughput, DenseBf16PeakByDeviceName) {
  EXPECT_EQ(mxdp::dense_bf16_peak_tflops("NVIDIA H100 80GB HBM3"), 989.5);
  EXPECT_EQ(mxdp::dense_bf16_peak_tflops("NVIDIA H200"), 989.5);
  EXPECT_EQ(mxdp::dense_bf16_peak_tflops("NVIDIA GH200 480GB"), 989.5);
  EXPECT_EQ(mxdp::dense_bf16_peak_tflops("NVIDIA H100 NVL"), 835.5);
  EXPECT_EQ(mxdp::dense_bf16_peak_tflops("NVIDIA H200 NVL"), 835.5);
  EXPECT_EQ(mxdp::dense_bf16_peak_tflops("NVIDIA H100 PCIe"), 756.5);
  EXPECT_EQ(mxdp::dense_bf16_peak_tflops("NVIDIA A100-SXM4-80GB"), 312.0);
  EXPECT_EQ(mxdp::dense_bf16_peak_tflops("NVIDIA L40S"), 0.0);
  EXPECT_EQ(mxdp::dense_bf16_peak_tflops(""), 0.0);
}

// At dp 2 the rate counts both ranks' tokens and the peak both ranks' devices:
// each line's mfu is its tokens_per_s * train_flops_per_token / (2 * peak).
TEST_F(TrainJob, MfuAtTwoRanksCountsBothDevices) {
  const std::string run2 = timed_mpirun_train();
  if (run2.empty()) GTEST_SKIP() << "mpirun not found";
  const std::string cmd = run2 + " --steps 3 --eval-every 0 --peak-tflops 0.001 --metrics " + quote(d / "m.jsonl") +
                          " > " + quote(d / "mpi.log") + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << mt::read_file(d / "mpi.log");
  const std::vector<json> all = lines_of(d / "m.jsonl");
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all[0].at("ranks").get<int>(), 2);
  const double fpt = all[0].at("train_flops_per_token");
  const std::vector<json> tl = train_lines(d / "m.jsonl");
  ASSERT_EQ(tl.size(), 3u);
  for (const json& j : tl) {
    const double want = j.at("tokens_per_s").get<double>() * fpt / (2 * 0.001e12);
    EXPECT_NEAR(j.at("mfu").get<double>(), want, 1e-12 * want) << j.dump();
  }
}

// Item 2: a --save-dir under a regular file is refused before step 1.
TEST_F(TrainJob, UnusableSaveDirIsFoundBeforeTheFirstStep) {
  mt::write_file(d / "plain", "a regular file\n");
  auto r = train("--steps 3 --eval-every 0 --save-dir " + quote(d / "plain/ck") + " --metrics " + quote(d / "m.jsonl"),
                 "under_file.log");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(mt::contains(r.output, "--save-dir")) << r.output;
  EXPECT_TRUE(mt::contains(r.output, "not usable")) << r.output;
  EXPECT_FALSE(std::regex_search(r.output, std::regex("step +1/"))) << "trained before finding it out\n" << r.output;
}

// Item 4: a second job on a save directory is refused naming the first; the
// first's live temporary is left alone; once it is gone, the next job removes it.
TEST_F(TrainJob, SecondJobOnASaveDirIsRefused) {
  const std::string ck = d / "ck";
  Spawned first(std::string(quote(MXDP_BINARY)) + " train " + common +
                    " --steps 1000000 --eval-every 0 --lr-decay-steps 0 --save-dir " + quote(ck) + " --metrics " +
                    quote(d / "m1.jsonl"),
                d / "first.log");
  ASSERT_TRUE(wait_for_train_lines(d / "m1.jsonl", 2)) << mt::read_file(d / "first.log");
  const std::string live_tmp = ck + "/step_000009.ckpt.tmp." + std::to_string(first.pid);
  fs::create_directories(live_tmp);
  auto second = train("--steps 3 --eval-every 0 --start-over --save-dir " + quote(ck), "second.log");
  EXPECT_NE(second.exit_code, 0) << second.output;
  EXPECT_TRUE(mt::contains(second.output, "in use by another job")) << second.output;
  EXPECT_TRUE(mt::contains(second.output, "pid " + std::to_string(first.pid))) << second.output;
  EXPECT_TRUE(fs::exists(live_tmp)) << "the live job's temporary was removed";
  ASSERT_EQ(::kill(first.pid, SIGTERM), 0);
  EXPECT_EQ(first.wait(60), 128 + SIGTERM) << mt::read_file(d / "first.log");
  auto third = train("--steps 3 --eval-every 0 --start-over --save-dir " + quote(ck), "third.log");
  ASSERT_EQ(third.exit_code, 0) << third.output;
  EXPECT_FALSE(fs::exists(live_tmp)) << third.output;
}

// Item 5: a fresh run into a directory with checkpoints is refused, naming the
// latest and the ways on; --load auto resumes from it (or starts fresh where
// there is none); --start-over replaces them.
TEST_F(TrainJob, FreshRunNeverReplacesCheckpoints) {
  const std::string ck = d / "ck";
  auto first = train("--steps 4 --save-every 2 --eval-every 0 --save-dir " + quote(ck), "first.log");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto fresh = train("--steps 2 --eval-every 0 --save-dir " + quote(ck), "fresh.log");
  EXPECT_NE(fresh.exit_code, 0) << fresh.output;
  for (const char* want : {"step_000004.ckpt", "--load", "--start-over"})
    EXPECT_TRUE(mt::contains(fresh.output, want)) << want << "\n" << fresh.output;
  EXPECT_EQ(latest_of(ck), "step_000004.ckpt");

  auto resumed = train("--steps 6 --eval-every 0 --load auto --save-dir " + quote(ck), "auto.log");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(mt::contains(resumed.output, "step 4")) << resumed.output;
  EXPECT_EQ(latest_of(ck), "step_000006.ckpt");
  EXPECT_EQ(mxdp::read_checkpoint(ck + "/step_000006.ckpt", false).iteration, 6);

  auto empty = train("--steps 2 --eval-every 0 --load auto --save-dir " + quote(d / "new"), "auto_new.log");
  ASSERT_EQ(empty.exit_code, 0) << empty.output;
  EXPECT_EQ(latest_of(d / "new"), "step_000002.ckpt");

  auto over = train("--steps 2 --eval-every 0 --start-over --save-dir " + quote(ck), "over.log");
  ASSERT_EQ(over.exit_code, 0) << over.output;
  EXPECT_EQ(latest_of(ck), "step_000002.ckpt");
  EXPECT_FALSE(fs::exists(ck + "/step_000006.ckpt")) << over.output;
}

// Item 6: a metrics file cut mid-line by an earlier run is repaired when a
// resumed run appends to it (and the run says so).
TEST_F(TrainJob, PartialMetricsLineIsDroppedOnResume) {
  const std::string ck = d / "ck", m = d / "m.jsonl";
  auto first = train("--steps 2 --eval-every 0 --save-dir " + quote(ck) + " --metrics " + quote(m), "first.log");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string whole = mt::read_file(m);
  mt::write_file(m, whole + "{\"kind\":\"train\",\"st");
  auto resumed = train("--steps 4 --eval-every 0 --load " + quote(ck) + " --save-dir " + quote(ck) + " --metrics " + quote(m),
                       "resumed.log");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(mt::contains(resumed.output, "partial line")) << resumed.output;
  const std::string after = mt::read_file(m);
  EXPECT_EQ(after.substr(0, whole.size()), whole);
  std::vector<json> all;
  ASSERT_NO_THROW(all = lines_of(m)) << after;
  EXPECT_EQ(train_lines(m).size(), 4u);
}

// A run resumed under other gather or compute settings than its checkpoint's
// says so once, naming both; one resumed under the same settings says nothing.
TEST_F(TrainJob, ResumeUnderOtherSettingsSaysSo) {
  const std::string ck = quote(d / "ck");
  auto first = train("--steps 2 --eval-every 0 --weight-format mxfp8 --save-dir " + ck, "first.log");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const nlohmann::json extra = mxdp::read_checkpoint_info(d / "ck" + "/step_000002.ckpt").extra;
  EXPECT_EQ(extra.value("weight_format", ""), "mxfp8") << extra.dump();
  EXPECT_EQ(extra.value("compute_dtype", ""), "bf16") << extra.dump();
  EXPECT_EQ(extra.value("num_layers_at_start_in_bf16", -1), 0) << extra.dump();
  EXPECT_EQ(extra.value("num_layers_at_end_in_bf16", -1), 0) << extra.dump();

  auto same = train("--steps 3 --eval-every 0 --weight-format mxfp8 --load auto --save-dir " + ck, "same.log");
  ASSERT_EQ(same.exit_code, 0) << same.output;
  EXPECT_FALSE(mt::contains(same.output, "was trained with")) << same.output;

  auto other = train("--steps 4 --eval-every 0 --weight-format fp8b128 --compute-dtype fp8 --load auto --save-dir " + ck,
                     "other.log");
  ASSERT_EQ(other.exit_code, 0) << other.output;
  const std::string want = "step_000003.ckpt was trained with weight_format mxfp8, compute_dtype bf16; this run goes "
                           "on with weight_format fp8b128, compute_dtype fp8.";
  EXPECT_TRUE(mt::contains(other.output, want)) << other.output;
  const size_t first_at = other.output.find("was trained with");
  EXPECT_EQ(other.output.find("was trained with", first_at + 1), std::string::npos) << "said twice:\n" << other.output;
}

// Item 8: options out of range are refused, naming the option.
TEST_F(TrainJob, OutOfRangeOptionsAreRefused) {
  for (const char* bad : {"--n-layer -1", "--n-head -2", "--d-model -32", "--max-seq -1", "--vocab -5",
                          "--lr-decay-steps -7", "--threads -3", "--threads 100000", "--seed -1"}) {
    auto r = train(std::string("--steps 1 --eval-every 0 ") + bad, "bad.log");
    const std::string flag = std::string(bad).substr(0, std::string(bad).find(' '));
    EXPECT_NE(r.exit_code, 0) << bad << "\n" << r.output;
    EXPECT_TRUE(mt::contains(r.output, flag)) << bad << "\n" << r.output;
  }
}

// Item 8: --eval-every 0 never evaluates, so a val.bin too small for a batch is fine.
TEST_F(TrainJob, NoEvalNeedsNoValidationBatch) {
  mt::write_file(d / "small_val.txt", mt::numbered_corpus());
  mxdp::prepare(d / "small_val.txt", d / "sv", 0.0005, nullptr);  // val.bin: ~8 tokens < 2 x 17
  ASSERT_LT(mxdp::TokenDataset((fs::path(d / "sv") / "val.bin").string()).size(), 34u);
  auto r = mt::run_mxdp("train " + std::string(kTiny) + " --data " + quote(d / "sv") + " --steps 2 --eval-every 0",
                        d / "sv.log");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto e = mt::run_mxdp("train " + std::string(kTiny) + " --data " + quote(d / "sv") + " --steps 2 --eval-every 1",
                        d / "sv_eval.log");
  EXPECT_NE(e.exit_code, 0) << e.output;
  EXPECT_TRUE(mt::contains(e.output, "val.bin")) << e.output;
}

// Item 3: SIGINT to a one-rank job: it finishes the step in flight, saves,
// says so and exits 130; the checkpoint resumes bitwise like an unbroken run.
TEST_F(TrainJob, SigintSavesAndResumesBitwise) {
  const std::string ck = d / "ck", sched = " --eval-every 0 --lr-decay-steps 0 --warmup-steps 2";
  Spawned job(std::string(quote(MXDP_BINARY)) + " train " + common + " --steps 1000000" + sched + " --save-dir " +
                  quote(ck) + " --metrics " + quote(d / "m.jsonl"),
              d / "job.log");
  ASSERT_TRUE(wait_for_train_lines(d / "m.jsonl", 3)) << mt::read_file(d / "job.log");
  ASSERT_EQ(::kill(job.pid, SIGINT), 0);
  EXPECT_EQ(job.wait(60), 130);
  const std::string out = mt::read_file(d / "job.log");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("stopped by SIGINT after step (\\d+): saved"))) << out;
  const int64_t n = std::stoll(m[1].str());
  EXPECT_EQ(latest_of(ck), mxdp::checkpoint_name(n)) << out;
  EXPECT_EQ(train_lines(d / "m.jsonl").back().at("step").get<int64_t>(), n) << "every trained step is reported";
  const std::string to = " --steps " + std::to_string(n + 3);
  auto resumed = train(to + sched + " --load " + quote(ck) + " --save-dir " + quote(ck), "resumed.log");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  auto whole = train(to + sched + " --save-dir " + quote(d / "ref"), "ref.log");
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  EXPECT_EQ(compare_params(ck + "/" + mxdp::checkpoint_name(n + 3), d / "ref" + "/" + mxdp::checkpoint_name(n + 3)),
            "");
}

namespace {
// The pids of mpirun's children, by their rank (OMPI_COMM_WORLD_RANK).
std::vector<std::pair<int, pid_t>> ranks_of(pid_t parent) {
  std::vector<std::pair<int, pid_t>> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = mt::read_file(e.path().string() + "/stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent) continue;
    const std::string env = mt::read_file(e.path().string() + "/environ");
    const std::string key = std::string("OMPI_COMM_WORLD_RANK=");
    const size_t at = env.find(key);
    if (at == std::string::npos) continue;
    out.push_back({std::atoi(env.c_str() + at + key.size()), pid_t(std::stoi(name))});
  }
  return out;
}
}  // namespace

// Item 3 under mpirun: SIGTERM reaches rank 1 alone; the ranks agree at the
// next step boundary, save together, rank 0 says so once, and the job exits
// non-zero; the checkpoint resumes bitwise (at dp 2) like an unbroken run.
TEST_F(TrainJob, SigtermToOneRankStopsAllWithOneCheckpoint) {
  const std::string run2 = mpirun_train(), timed = timed_mpirun_train();
  if (run2.empty()) GTEST_SKIP() << "mpirun not found";
  const std::string ck = d / "ck", sched = " --eval-every 0 --lr-decay-steps 0 --warmup-steps 2";
  // exec'd through `env` so that the spawned pid is mpirun's.
  Spawned job("env " + run2 + " --steps 1000000" + sched + " --save-dir " + quote(ck) + " --metrics " +
                  quote(d / "m.jsonl"),
              d / "job.log");
  ASSERT_TRUE(wait_for_train_lines(d / "m.jsonl", 3)) << mt::read_file(d / "job.log");
  pid_t rank1 = -1;
  for (auto [r, p] : ranks_of(job.pid))
    if (r == 1) rank1 = p;
  ASSERT_GT(rank1, 0) << "no rank 1 among mpirun's children";
  ASSERT_EQ(::kill(rank1, SIGTERM), 0);
  const int code = job.wait(90);
  const std::string out = mt::read_file(d / "job.log");
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(code, -1) << "the job did not stop\n" << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("stopped by SIGTERM after step (\\d+): saved"))) << out;
  EXPECT_EQ(out.find("stopped by"), out.rfind("stopped by")) << "one message\n" << out;
  const int64_t n = std::stoll(m[1].str());
  EXPECT_EQ(latest_of(ck), mxdp::checkpoint_name(n)) << out;
  const std::string to = " --steps " + std::to_string(n + 2);
  const int rc = std::system((timed + to + sched + " --load " + quote(ck) + " --save-dir " +
                              quote(ck) + " > " + quote(d / "resumed.log") + " 2>&1").c_str());
  ASSERT_EQ(rc, 0) << mt::read_file(d / "resumed.log");
  const int rr = std::system((timed + to + sched + " --save-dir " + quote(d / "ref") + " > " +
                              quote(d / "ref.log") + " 2>&1").c_str());
  ASSERT_EQ(rr, 0) << mt::read_file(d / "ref.log");
  EXPECT_EQ(compare_params(ck + "/" + mxdp::checkpoint_name(n + 2), d / "ref" + "/" + mxdp::checkpoint_name(n + 2)),
            "");
}

// Item 8: a NaN (or Inf) in an --init-from tensor is refused at load, naming
// the tensor, instead of a run that skips steps and calls itself diverged.
TEST_F(TrainJob, NonFiniteInitFromTensorIsRefused) {
  ASSERT_EQ(train("--steps 2 --eval-every 0 --save-dir " + quote(d / "ck"), "a.log").exit_code, 0);
  auto ex = mt::run_mxdp("export --load " + quote(d / "ck") + " --output " + quote(d / "hf"), d / "ex.log");
  ASSERT_EQ(ex.exit_code, 0) << ex.output;
  // The safetensors layout by hand: u64 header size, JSON header, then the data.
  std::string bytes = mt::read_file(d / "hf/model.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const json h = json::parse(bytes.substr(8, n));
  const std::string name = "transformer.h.0.mlp.c_fc.weight";
  ASSERT_TRUE(h.contains(name)) << h.dump();
  ASSERT_EQ(h[name].at("dtype"), "F32");
  for (const auto& [what, bits] : {std::pair{"nan", 0x7fc00000u}, {"inf", 0x7f800000u}}) {
    std::string poked = bytes;
    const size_t at = 8 + n + h[name]["data_offsets"][0].get<size_t>() + 4 * 5;  // its element 5
    std::memcpy(poked.data() + at, &bits, 4);
    const std::string file = d / (std::string(what) + ".safetensors");
    mt::write_file(file, poked);
    auto r = train("--steps 2 --eval-every 0 --init-from " + quote(file), std::string(what) + ".log");
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_TRUE(mt::contains(r.output, "mlp.fc.w")) << r.output;
    // HF's Conv1D stores it [d_model, 4 d_model] = [32, 128]; the model holds its
    // transpose [128, 32]: HF element 5 (row 0, column 5) is the model's 5 * 32 + 0.
    EXPECT_TRUE(mt::contains(r.output, "element 160 ")) << r.output;
    EXPECT_FALSE(mt::contains(r.output, "diverged")) << r.output;
  }
  auto ok = train("--steps 2 --eval-every 0 --init-from " + quote(d / "hf"), "ok.log");
  EXPECT_EQ(ok.exit_code, 0) << "the unpoked export loads\n" << ok.output;
}

// Item 9: the default --data is shown as the README shows it, and found from
// the working directory or beside the executable, not in the build's source tree.
TEST_F(TrainJob, DefaultDataIsNotTheBuildTree) {
  auto help = mt::run_mxdp("train --help", d / "help.log");
  EXPECT_TRUE(std::regex_search(help.output, std::regex("--data TEXT=data/kjv.txt"))) << help.output;
  EXPECT_FALSE(mt::contains(help.output, std::string(MXDP_SOURCE_DIR) + "/data")) << help.output;
  // A copy of the binary in a tree of its own: bin/mxdp finds bin/../data/kjv.txt.
  fs::create_directories(d / "tree/bin");
  fs::create_directories(d / "tree/data");
  fs::copy_file(MXDP_BINARY, d / "tree/bin/mxdp");
  mt::write_file(d / "tree/data/kjv.txt", mt::read_file(d / "corpus.txt"));
  const std::string run = "cd " + quote(d.path.string()) + " && " + quote(d / "tree/bin/mxdp") + " train " + kTiny +
                          " --steps 1 --eval-every 0 > " + quote(d / "tree.log") + " 2>&1";
  ASSERT_EQ(std::system(run.c_str()), 0) << mt::read_file(d / "tree.log");
  EXPECT_TRUE(fs::exists(d / "tree/data/kjv.txt.mxdp")) << mt::read_file(d / "tree.log");
}

// FP8 compute (compute_dtype fp8): the model's linear layers read the engine's
// FP8 W, which inference hooks without an engine cannot hand out. The run's
// closing sample runs on the trained weights all the same (it once failed the
// run after training: "fp8_weight(4): these hooks have no FP8 weights").
TEST_F(TrainJob, Fp8ComputeRunEndsWithItsSample) {
  // GPT-2, and a Llama (its CPU model computes in FP8 too).
  for (const std::string model : {"tiny --n-layer 1 --d-model 128 --n-head 2", "llama-tiny --n-layer 1"}) {
    const std::string args =
        "train --model " + model + " --seq-len 16 --batch-size 2 --eval-batches 1 "
        "--threads 1 --progress lines --log-every 1 --comm-timeout 60 --weight-format fp8b128 --compute-dtype fp8 "
        "--steps 2 --eval-every 0 --sample-tokens 5 --start-over --data " +
        quote(d / "data") + " --save-dir " + quote(d / "fp8run");
    auto r = mt::run_mxdp(args, d / "fp8.log");
    EXPECT_EQ(r.exit_code, 0) << model << "\n" << r.output;
    EXPECT_TRUE(mt::contains(r.output, "sample (5 tokens")) << model << "\n" << r.output;
    EXPECT_TRUE(mt::contains(r.output, "compute_dtype               = fp8")) << model << "\n" << r.output;
    EXPECT_FALSE(mt::contains(r.output, "no FP8 weights")) << model << "\n" << r.output;
  }
}

namespace {
// Every file under `dir` (by its path there) and its bytes, the lock file aside
// (each job writes its holder there).
std::map<std::string, std::string> files_of(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename() != ".mxdp-lock")
      out[fs::relative(e.path(), dir).string()] = mt::read_file(e.path().string());
  return out;
}
}  // namespace

// A requeued job (SLURM, torchrun restarts) repeats its command after its run
// finished: --load auto at (or past) --steps has nothing to do, says so in one
// line and exits 0, writing no checkpoint and no metrics line (--eval-first
// included: there is no first step). An explicit --load at --steps is still an
// error: that command asks to train what cannot be trained.
TEST_F(TrainJob, LoadAutoOnAFinishedRunDoesNothing) {
  const std::string ck = d / "ck", m = d / "m.jsonl";
  const std::string out = " --eval-every 2 --save-dir " + quote(ck) + " --metrics " + quote(m);
  auto first = train("--steps 3 --load auto" + out, "first.log");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_EQ(latest_of(ck), "step_000003.ckpt");
  const auto checkpoints = files_of(ck);
  const std::string metrics = mt::read_file(m);
  ASSERT_FALSE(metrics.empty());

  for (const std::string extra : {"--steps 3", "--steps 2", "--steps 3 --eval-first"}) {
    auto again = train(extra + " --load auto" + out, "again.log");
    EXPECT_EQ(again.exit_code, 0) << extra << "\n" << again.output;
    const std::string want = "nothing to do: " + ck + "'s latest checkpoint is at step 3, --steps " +
                             extra.substr(8, 1) + "\n";
    EXPECT_TRUE(mt::contains(again.output, want)) << extra << "\n" << again.output;
    EXPECT_FALSE(mt::contains(again.output, "resuming")) << extra << "\n" << again.output;
    EXPECT_FALSE(mt::contains(again.output, "eval  step")) << extra << "\n" << again.output;
    EXPECT_TRUE(files_of(ck) == checkpoints) << extra << ": the checkpoints changed";
    EXPECT_TRUE(mt::read_file(m) == metrics) << extra << ": the metrics file changed";
  }

  auto given = train("--steps 3 --load " + quote(ck) + out, "given.log");
  EXPECT_NE(given.exit_code, 0) << given.output;
  EXPECT_TRUE(mt::contains(given.output, "nothing to train: '" + ck + "/step_000003.ckpt' is already at step 3"))
      << given.output;
  EXPECT_TRUE(files_of(ck) == checkpoints) << "the checkpoints changed";
  EXPECT_TRUE(mt::read_file(m) == metrics) << "the metrics file changed";

  // Past the end, auto still trains on.
  auto longer = train("--steps 4 --load auto" + out, "longer.log");
  ASSERT_EQ(longer.exit_code, 0) << longer.output;
  EXPECT_TRUE(mt::contains(longer.output, "--load auto: resuming from " + ck + "/step_000003.ckpt")) << longer.output;
  EXPECT_EQ(latest_of(ck), "step_000004.ckpt");
}
