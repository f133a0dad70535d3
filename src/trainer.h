// Trainer: the training job behind `mxdp train` — GPT model, token shards,
// the data-parallel engine, evals, checkpoints, progress and metrics.
//
// Every option lives in TrainConfig with its default; cli/cmd_train.cpp maps
// flags onto it one to one, and the run header prints every effective value.
#pragma once

#include <cstdint>
#include <string>

#include "comm.h"
#include "gpt.h"
#include "options.h"

namespace mxdp {

struct TrainConfig {
  // where: "cpu", "cuda" or "auto" (resolved by the caller, runtime.h)
  std::string device = "cpu";
  // model
  std::string model = "tiny";  // named config; the four fields below override it when > 0
  int n_layer = 0, n_head = 0, d_model = 0, max_seq = 0;
  int vocab = 0;            // > 0: vocabulary size (wte padded to a multiple of 128 rows)
  std::string init_from;    // Hugging Face GPT-2 (dir or .safetensors) to start from (hf_gpt2.h)
  // data: a directory with train.bin/val.bin (mxdp prepare), or a text file,
  // which rank 0 prepares into <dir of file>/<stem>/ on first use, or llm.c
  // token shards (a glob or comma-separated list; llmc_shards.h).
  std::string data;
  // schedule
  int64_t steps = 300;
  int batch_size = 8;   // sequences per rank per micro-batch
  int seq_len = 64;
  uint64_t seed = 1337;
  // eval
  int64_t eval_every = 50;  // 0 = never (a last eval runs at the end unless 0)
  int eval_batches = 8;
  bool eval_first = false;  // also evaluate before the first step
  int eval_passes = 1;      // run each eval this many times; all passes must agree bitwise
  // checkpoints
  int64_t save_every = 0;   // 0 = only at the end (when save_dir is set)
  std::string save_dir;
  std::string load;         // checkpoint file, or a directory holding `latest`
  // output
  std::string metrics;      // JSON lines file (appended to when resuming)
  int64_t log_every = 10;   // plain progress line every N steps (progress "lines")
  std::string progress = "auto";  // bar (one updating line), lines, or auto: bar on a terminal
                                  // unless under mpirun (which gives ranks a pty even when piped)
  int sample_tokens = 200;  // generated at the end (0 = none)
  std::string sample_prompt; // text the sample continues (empty: a new line)
  int threads = 0;          // OpenMP threads per rank (0 = cores / local ranks)
  double comm_timeout = 300;
  // the data-parallel core
  DpOptions dp;
};

// Runs the job on `comm`'s ranks, on cfg.device ("cpu" or "cuda"; comm must
// be the communicator make_job_communicator() gives for it). Returns the exit code.
int train(const TrainConfig& cfg, Communicator& comm);

// The model config a TrainConfig names (named config plus overrides), validated.
GptConfig resolve_model(const TrainConfig& cfg);
// Path of the checkpoint of `step` in `dir`, and the file naming the latest.
std::string checkpoint_path(const std::string& dir, int64_t step);
std::string resolve_checkpoint(const std::string& file_or_dir);

}  // namespace mxdp
