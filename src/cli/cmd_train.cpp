// mxdp train: the training job (train/trainer.h). Every option of the
// data-parallel core, plus model, data, schedule, eval and checkpoint options.
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>

#include "util/check.h"
#include "cli/commands.h"
#include "comm/launcher.h"
#include "comm/comm.h"
#include "formats/format.h"
#include "models/registry.h"
#include "train/runtime.h"
#include "train/trainer.h"

namespace mxdp::cli {

namespace {
// The corpus a run without --data trains on, as the help shows it.
constexpr const char* kDefaultCorpus = "data/kjv.txt";

// Where kDefaultCorpus is: under the working directory, else beside the
// executable's folder (build/mxdp -> data/kjv.txt of the same tree), never the
// path of the tree the binary was built from.
std::string find_default_corpus() {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(kDefaultCorpus, ec)) return kDefaultCorpus;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path beside = exe.parent_path().parent_path() / kDefaultCorpus;
    if (fs::exists(beside, ec)) return beside.string();
  }
  MXDP_FAIL("no --data given and no ", kDefaultCorpus, " in the working directory or beside ",
            ec ? std::string("the executable") : exe.parent_path().string(),
            ": pass --data DIR (made by `mxdp prepare`) or a text file");
}

// "tiny, gpt2-124m, ...": the presets of every registered model.
std::string model_preset_names() {
  std::string s;
  for (const ModelSpec* m : all_models())
    for (const std::string& p : m->presets()) s += (s.empty() ? "" : ", ") + p;
  return s;
}

// on|off switches, kept as text until the run so that CLI11 prints them as such.
struct Switches {
  std::map<std::string, std::string> v;
  void add(CLI::App* cmd, const std::string& flag, const std::string& def, const std::string& help,
           const std::string& group) {
    v[flag] = def;
    std::vector<std::string> allowed = {"on", "off"};
    if (def == "auto") allowed.push_back("auto");
    cmd->add_option(flag, v[flag], help)->check(CLI::IsMember(allowed))->group(group);
  }
  // "auto" resolves to `when_auto`.
  bool get(const std::string& flag, bool when_auto = false) const {
    const std::string& s = v.at(flag);
    return s == "auto" ? when_auto : s == "on";
  }
};
// The train command's options as the command line gives them.
struct TrainArgs {
  TrainConfig c;
  Switches sw;
  std::string weight_format = "mxfp8", rounding = "rceil", grad_dtype = "fp32", backend = "auto";
  std::string compute_dtype = "bf16";
  bool data_given = false;  // else the shipped corpus (find_default_corpus)
};

void add_model_options(CLI::App* cmd, TrainConfig& c) {
  auto model = "Model";
  cmd->add_option("--device", c.device, "Where to train: cuda (one GPU per rank), cpu, or auto (cuda where a GPU is present)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))->group(model);
  cmd->add_option("--model", c.model, "Named config: " + model_preset_names())->group(model);
  cmd->add_option("--n-layer", c.n_layer, "Override the config's number of blocks (0 = keep)")->group(model);
  cmd->add_option("--n-head", c.n_head, "Override the number of attention heads (0 = keep)")->group(model);
  cmd->add_option("--d-model", c.d_model, "Override the width, a multiple of 32 (0 = keep)")->group(model);
  cmd->add_option("--max-seq", c.max_seq, "Override the longest sequence (0 = keep)")->group(model);
  cmd->add_option("--vocab", c.vocab, "Override the vocabulary size, e.g. a BPE tokenizer's (0 = keep)")->group(model);
  cmd->add_option("--init-from", c.init_from,
                  "Start from a Hugging Face model of the architecture (GPT-2, Llama, Qwen2): a directory (config.json + "
                  "model.safetensors or its sharded index) or a .safetensors file")
      ->group(model);
}

void add_data_options(CLI::App* cmd, TrainConfig& c) {
  auto data = "Data and schedule";
  cmd->add_option("--data", c.data, "Directory with train.bin/val.bin (mxdp prepare), or a text file to prepare")->group(data);
  cmd->add_option("--steps", c.steps, "Optimizer steps to train to (a resumed run continues up to this step)")->group(data);
  cmd->add_option("--batch-size", c.batch_size, "Sequences per rank per micro-batch")->group(data);
  cmd->add_option("--seq-len", c.seq_len, "Tokens per sequence (<= the model's max_seq)")->group(data);
  cmd->add_option("--seed", c.seed, "Seed of the weights and of the data order")
      ->check(CLI::NonNegativeNumber)->group(data);
  cmd->add_option("--threads", c.threads, "OpenMP threads per rank (0 = cores / ranks on the node)")->group(data);
}

void add_output_options(CLI::App* cmd, TrainConfig& c) {
  auto ev = "Eval, checkpoints, output";
  cmd->add_option("--eval-every", c.eval_every, "Evaluate every N steps and after the last (0 = never)")->group(ev);
  cmd->add_option("--eval-batches", c.eval_batches, "Validation batches per eval (the same every time)")->group(ev);
  cmd->add_flag("--eval-first", c.eval_first, "Also evaluate before the first step")->group(ev);
  cmd->add_option("--eval-passes", c.eval_passes, "Run each eval N times; the passes must agree bitwise")->group(ev);
  cmd->add_option("--save-every", c.save_every, "Save a checkpoint every N steps (0 = only after the last step)")->group(ev);
  cmd->add_option("--save-dir", c.save_dir, "Directory for step_NNNNNN.ckpt checkpoints and `latest`")->group(ev);
  cmd->add_option("--keep-last", c.keep_last, "Keep only the newest N checkpoints in --save-dir (0 = all)")->group(ev);
  cmd->add_option("--load", c.load,
                  "Resume from a checkpoint (step_NNNNNN.ckpt), a save directory (its latest), or auto (--save-dir's "
                  "latest if it has one, else start fresh: for jobs that are requeued; a run already at --steps is done, exit 0)")->group(ev);
  cmd->add_flag("--start-over", c.start_over,
                "Train from scratch into a --save-dir that holds checkpoints, removing them (else refused)")->group(ev);
  cmd->add_option("--max-skipped-steps", c.max_skipped_steps,
                  "Stop with an error after N consecutive steps skipped for non-finite gradients (0 = never)")->group(ev);
  cmd->add_option("--metrics", c.metrics, "Write JSON lines: one per train step and one per eval")->group(ev);
  cmd->add_option("--log-every", c.log_every, "With --progress lines: a line every N steps")->group(ev);
  cmd->add_option("--peak-tflops", c.peak_tflops,
                  "Peak dense bf16 TFLOP/s of one rank's device, for MFU in the progress line and the metrics (0 = "
                  "on a GPU its peak by name: H100 and H200 989.5, their NVL forms 835.5, H100 PCIe 756.5, A100 312; "
                  "no MFU on the CPU or another GPU)")->group(ev);
  cmd->add_option("--progress", c.progress, "bar (one updating line), lines, or auto (bar on a terminal, lines under mpirun)")
      ->check(CLI::IsMember({"auto", "bar", "lines"}))->group(ev);
  cmd->add_option("--sample-tokens", c.sample_tokens, "Tokens to generate at the end (0 = none)")->group(ev);
  cmd->add_option("--sample-prompt", c.sample_prompt, "Text the final sample continues (empty: a new line)")->group(ev);
}

void add_core_options(CLI::App* cmd, TrainArgs& a) {
  auto core = "Data-parallel core";
  a.sw.add(cmd, "--distributed-optimizer", "on", "Shard fp32 masters + AdamW state over ranks (off = reference mode)", core);
  cmd->add_option("--weight-format", a.weight_format, "Param gather format of 2-D weights")
      ->check(CLI::IsMember({"bf16", "mxfp8", "nvfp4", "fp8b128"}))->group(core);
  add_compute_dtype_option(cmd, a.compute_dtype, "needs --weight-format fp8b128")->group(core);
  cmd->add_option("--num-layers-at-start-in-bf16", a.c.dp.num_layers_at_start_in_bf16,
                  "With --compute-dtype fp8: the first N blocks compute their linear layers in bf16 (Megatron-LM's option)")
      ->check(CLI::NonNegativeNumber)->group(core);
  cmd->add_option("--num-layers-at-end-in-bf16", a.c.dp.num_layers_at_end_in_bf16,
                  "With --compute-dtype fp8: the last N blocks compute their linear layers in bf16")
      ->check(CLI::NonNegativeNumber)->group(core);
  cmd->add_option("--mxfp8-scale-rounding", a.rounding, "E8M0 scale rounding: rceil (TransformerEngine) or floor (OCP MX)")
      ->check(CLI::IsMember({"rceil", "floor"}))->group(core);
  a.sw.add(cmd, "--overlap-param-gather", "auto", "Defer each bucket's all-gather to just before its first layer (auto: on with the distributed optimizer)", core);
  a.sw.add(cmd, "--overlap-grad-reduce", "on", "Start each bucket's reduce-scatter as soon as its grads are in", core);
  a.sw.add(cmd, "--reuse-grad-buf", "auto", "Put the MXFP8 gather payload in the idle grad buffer (auto: on for mxfp8 with the distributed optimizer)", core);
  add_bucket_size_option(cmd, a.c.dp.bucket_size)->group(core);
  cmd->add_option("--grad-reduce-dtype", a.grad_dtype, "Reduce-scatter dtype")
      ->check(CLI::IsMember({"fp32", "bf16"}))->group(core);
  cmd->add_option("--micro-batches", a.c.dp.micro_batches, "Gradient accumulation steps per optimizer step")->group(core);
  cmd->add_option("--backend", a.backend, "Communication backend (auto: self for one rank, else mpi on the CPU; "
                  "on cuda NCCL, bootstrapped over MPI or the launcher's rendezvous)")
      ->check(CLI::IsMember({"auto", "self", "mpi"}))->group(core);
  cmd->add_option("--comm-timeout", a.c.comm_timeout, "Seconds a collective may take before the job aborts")->group(core);
}

void add_optimizer_options(CLI::App* cmd, TrainConfig& c) {
  auto optg = "Optimizer";
  cmd->add_option("--lr", c.dp.lr,
                  "Peak learning rate (default: by the model's width: 3e-3 up to d_model 256, then GPT-3's for the width: "
                  "6e-4 up to 768, 3e-4 up to 1024, 2.5e-4 up to 1536, 2e-4 up to 2048, ...)")
      ->default_str("by model")->group(optg);
  cmd->add_option("--min-lr", c.dp.min_lr, "Learning rate at the end of the cosine decay")
      ->default_str("lr / 10")->group(optg);
  cmd->add_option("--warmup-steps", c.dp.warmup_steps, "Linear warmup steps")->group(optg);
  cmd->add_option("--lr-decay-steps", c.dp.lr_decay_steps, "Cosine decay ends here (-1 = --steps, 0 = no decay)")->group(optg);
  cmd->add_option("--weight-decay", c.dp.weight_decay, "Decoupled weight decay (never on 1-D params)")->group(optg);
  cmd->add_option("--adam-beta1", c.dp.adam_beta1, "AdamW first-moment decay")->group(optg);
  cmd->add_option("--adam-beta2", c.dp.adam_beta2, "AdamW second-moment decay")->group(optg);
  cmd->add_option("--adam-eps", c.dp.adam_eps, "AdamW epsilon")->group(optg);
  cmd->add_option("--clip-grad", c.dp.clip_grad, "Clip the global grad norm to this (0 = off)")->group(optg);
  cmd->add_flag("--override-schedule", c.override_schedule,
                "Resuming: use the command line's lr, min-lr, warmup and decay instead of the checkpoint's")->group(optg);
}

// The run the options describe: every switch resolved, the device and the
// communicator made, then the training job.
int run_train(const TrainArgs& a) {
  TrainConfig cfg = a.c;
  if (!a.data_given) cfg.data = find_default_corpus();
  cfg.dp.weight_format = parse_weight_format(a.weight_format);
  cfg.dp.compute_dtype = parse_compute_dtype(a.compute_dtype);
  const bool dist = a.sw.get("--distributed-optimizer");
  cfg.dp.distributed_optimizer = dist;
  cfg.dp.overlap_param_gather = a.sw.get("--overlap-param-gather", dist);
  cfg.dp.overlap_grad_reduce = a.sw.get("--overlap-grad-reduce");
  cfg.dp.reuse_grad_buf =
      a.sw.get("--reuse-grad-buf", dist && format_traits(cfg.dp.weight_format).fits_grad_buffer);
  cfg.dp.mxfp8_scale_rounding = parse_scale_rounding(a.rounding);
  cfg.dp.grad_reduce_dtype = parse_grad_reduce_dtype(a.grad_dtype);
  Communicator::Options co;
  co.backend = a.backend == "self" ? Backend::Self : a.backend == "mpi" ? Backend::Mpi : Backend::Auto;
  co.timeout_s = cfg.comm_timeout;
  if (co.backend == Backend::Self) {
    // Each process would be a one-rank job of its own, unaware of the others.
    const LaunchInfo& l = this_launch();
    MXDP_CHECK(l.size <= 1, "--backend self runs one rank, but ", launcher_name(l.launcher), " started ", l.size,
               " ranks: each would train alone on its own. Use --backend auto (or mpi, nccl), or start one "
               "process");
  }
  const Device device = resolve_device(cfg.device);
  cfg.device = to_string(device);
  auto comm = make_job_communicator(device, co);
  return train(cfg, *comm);
}

}  // namespace

void add_train_command(CLI::App& app, Runner& run) {
  auto a = std::make_shared<TrainArgs>();
  TrainConfig& c = a->c;
  c.data = kDefaultCorpus;
  c.device = "auto";
  c.dp.lr_decay_steps = -1;  // = --steps
  // Defaults of the training job: the tiny GPT on the shipped corpus learns
  // clearly in a couple of minutes on two CPU ranks.
  c.steps = 1200;
  c.seq_len = 128;
  c.eval_every = 100;
  c.lr_follows_model = true;  // --lr / --min-lr not given: by the model's width (train/schedule.h)
  c.dp.warmup_steps = 20;
  CLI::App* cmd = app.add_subcommand("train", "Train a GPT with data parallelism (run under mpirun for several ranks)");
  cmd->option_defaults()->always_capture_default();
  add_model_options(cmd, c);
  add_data_options(cmd, c);
  add_output_options(cmd, c);
  add_core_options(cmd, *a);
  add_optimizer_options(cmd, c);

  cmd->callback([a, cmd, &run] {
    // Which schedule options the command line set: a resumed run checks them
    // against the checkpoint's schedule (trainer.h).
    auto& given = a->c.schedule_given;
    given.lr = cmd->count("--lr") > 0;
    given.min_lr = cmd->count("--min-lr") > 0;
    given.warmup_steps = cmd->count("--warmup-steps") > 0;
    given.lr_decay_steps = cmd->count("--lr-decay-steps") > 0;
    a->data_given = cmd->count("--data") > 0;
    run = [a] { return run_train(*a); };
  });
}

}  // namespace mxdp::cli
