// Trainer: the training job behind `mxdp train` — a registered model
// (models/registry.h), token shards,
// the data-parallel engine, evals, checkpoints, progress and metrics.
//
// Every option lives in TrainConfig with its default; cli/cmd_train.cpp maps
// flags onto it one to one, and the run header prints every effective value.
//
// What a job promises (issue 12): every file it writes is checked (a failed
// write stops the run with the path and the reason, non-zero exit); a resumed
// run continues the checkpoint's learning-rate schedule unless told otherwise;
// a run with nothing to train says so (an error, but for --load auto on a run
// already at --steps: a requeued job with nothing to do, exit 0); a diverged
// run stops with an error and never replaces a good checkpoint; interrupted
// saves leave nothing behind after the next run; --keep-last bounds the
// checkpoints kept.
//
// And (issue 21): the save directory is probed and locked before the first
// step (train/save_dir.h); a fresh run never replaces a directory's
// checkpoints unless told to; SIGINT/SIGTERM stop every rank at the same step
// boundary with a checkpoint (train/shutdown.h); throughput and ETA come from
// each step's own time on the device, evals and saves apart (train/throughput.h).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "comm/comm.h"
#include "models/registry.h"
#include "engine/options.h"
#include "train/checkpoints.h"

namespace mxdp {

struct TrainConfig {
  // where: "cpu", "cuda" or "auto" (resolved by the caller, runtime.h)
  std::string device = "cpu";
  // model
  std::string model = "tiny";  // named config (a preset of a registered model); the fields below override it when > 0
  int n_layer = 0, n_head = 0, d_model = 0, max_seq = 0;
  int vocab = 0;            // > 0: vocabulary size (wte padded to a multiple of 128 rows)
  std::string init_from;    // Hugging Face model (dir or .safetensors) to start from (ModelSpec::hf_import)
  // data: a directory with train.bin/val.bin (mxdp prepare), or a text file,
  // which rank 0 prepares into <file>.mxdp/ beside it (data.h, prepare_cached),
  // or llm.c token shards (a glob or comma-separated list; llmc_shards.h).
  std::string data;
  // schedule
  int64_t steps = 300;
  int batch_size = 8;   // sequences per rank per micro-batch
  int seq_len = 64;
  uint64_t seed = 1337;
  // Resuming: the learning-rate schedule (dp.lr, dp.min_lr, dp.warmup_steps,
  // dp.lr_decay_steps) comes from the checkpoint. A schedule option the command
  // line set (schedule_given) must then agree with the checkpoint's, unless
  // override_schedule, which applies the command line's whole schedule instead
  // (Megatron's --override-opt_param-scheduler).
  struct ScheduleGiven {
    bool lr = false, min_lr = false, warmup_steps = false, lr_decay_steps = false;
  } schedule_given;
  bool override_schedule = false;
  // `mxdp train`'s defaults: a schedule whose lr was not given (schedule_given)
  // peaks at default_peak_lr(the model's d_model), and one whose min_lr was not
  // given decays to a tenth of its peak. Off (dp.lr and dp.min_lr as they are)
  // for a TrainConfig built in code.
  bool lr_follows_model = false;
  // eval
  int64_t eval_every = 50;  // 0 = never (a last eval runs at the end unless 0)
  int eval_batches = 8;
  bool eval_first = false;  // also evaluate before the first step
  int eval_passes = 1;      // run each eval this many times; all passes must agree bitwise
  // checkpoints
  int64_t save_every = 0;   // 0 = only at the end (when save_dir is set)
  std::string save_dir;
  int keep_last = 0;        // keep only the newest N checkpoints in save_dir (0 = all)
  std::string load;         // step directory, single-file checkpoint, a save_dir holding `latest`,
                            // or "auto": save_dir's latest when it has one, else a fresh run
                            // (a latest already at `steps`: nothing to do, train() returns 0)
  bool start_over = false;  // a fresh run into a save_dir holding checkpoints removes them (else refused)
  // divergence: stop with an error after this many consecutive steps skipped
  // for non-finite gradients (0 = never stop)
  int max_skipped_steps = 10;
  // output
  std::string metrics;      // JSON lines file (appended to when resuming)
  int64_t log_every = 10;   // plain progress line every N steps (progress "lines")
  // Peak dense bf16 TFLOP/s of one rank's device: with it the progress line
  // and the metrics show MFU (the model's training FLOPs a second over
  // peak_tflops per rank); 0: on a GPU its peak by name
  // (dense_bf16_peak_tflops), no MFU where that is unknown and on the CPU.
  double peak_tflops = 0;
  std::string progress = "auto";  // bar (one updating line), lines, or auto: bar on a terminal
                                  // unless under mpirun (which gives ranks a pty even when piped)
  int sample_tokens = 200;  // generated at the end (0 = none)
  std::string sample_prompt; // text the sample continues (empty: a new line)
  int threads = 0;          // OpenMP threads per rank (0 = cores / local ranks)
  double comm_timeout = 300;
  // the data-parallel core
  DpOptions dp;
  // Tests only (no flag sets them): the host clock that times steps (on the
  // CPU), evals and saves (empty: the steady clock), and a call inside each
  // timed span ("step", "eval", "save"; with the clock: work of a known duration).
  std::function<double()> clock;
  std::function<void(const char* phase, int64_t step)> on_phase;
};

// Runs the job on `comm`'s ranks, on cfg.device ("cpu" or "cuda"; comm must
// be the communicator make_job_communicator() gives for it). Returns the exit
// code; every failure is an mxdp::Error thrown on every rank.
int train(const TrainConfig& cfg, Communicator& comm);

// The model config a TrainConfig names (named config plus overrides), validated.
ModelConfig resolve_model(const TrainConfig& cfg);

// Model `mc`'s params as it lists them under `dp`'s compute options: with
// compute_dtype fp8, fp8_linear only on the blocks that compute in FP8
// (Fp8Compute::apply). Throws the one refusal train and plan both give, naming
// `model`, for FP8 compute options that do not fit each other or the model
// (DpOptions::validate_fp8_compute, check_fp8_compute, Fp8Compute::check).
// Every model that lists FP8 linear weights computes in FP8 on both devices.
std::vector<ParamSpec> compute_param_specs(const ModelConfig& mc, const DpOptions& dp, const std::string& model);

}  // namespace mxdp
