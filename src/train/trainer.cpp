// (One file of over 500 lines: the job's phases share its state.)
// The training job: set-up (options, data, checkpoint to resume, schedule,
// model and engine, header), then steps, evals and saves, then the final
// sample. Runs the same code on every rank; rank 0 ("the lead") alone prints
// and writes metrics and `latest`, and its errors reach every rank (on_rank0).
#include "train/trainer.h"

#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <functional>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <thread>

#include "util/check.h"
#include "comm/launcher.h"
#include "io/checkpoint.h"
#include "data/data.h"
#include "engine/engine.h"
#include "engine/layout.h"
#include "io/fileio.h"
#include "data/llmc_shards.h"
#include "train/runtime.h"
#include "train/sample.h"
#include "train/save_dir.h"
#include "train/schedule.h"
#include "train/shutdown.h"
#include "train/throughput.h"
#include "data/tokenizer.h"

namespace mxdp {

namespace fs = std::filesystem;
using nlohmann::json;

ModelConfig resolve_model(const TrainConfig& cfg) {
  return model_config(cfg.model, {.n_layer = cfg.n_layer, .n_head = cfg.n_head, .d_model = cfg.d_model,
                                  .max_seq = cfg.max_seq, .vocab = cfg.vocab});
}

std::vector<ParamSpec> compute_param_specs(const ModelConfig& mc, const DpOptions& dp, const std::string& model) {
  dp.validate_fp8_compute();
  // apply checks the counts and check_fp8_compute's rules when compute_dtype is fp8.
  return dp.model_fp8_compute().apply(mc.spec().param_specs(mc), mc.spec().n_layer(mc), model);
}

namespace {

struct OwnedBatch {
  std::vector<int32_t> in, tgt;
  Batch batch;
  void take(const Batch& b) {
    in.assign(b.inputs, b.inputs + size_t(b.B) * b.T);
    tgt.assign(b.targets, b.targets + size_t(b.B) * b.T);
    batch = {in.data(), tgt.data(), b.B, b.T};
  }
};

// Both splits must come from one tokenizer: a val split of another would be
// scored on ids that mean other tokens (or lie past the model's vocabulary).
void check_same_tokenizer(const TokenDataset& train, const TokenDataset& val) {
  MXDP_CHECK(val.vocab_size() == train.vocab_size(), "the validation data's ('", val.path(), "') vocab is ",
             val.vocab_size(), " but the training data's ('", train.path(), "') is ", train.vocab_size(),
             ": they were made by different tokenizers; prepare both from one tokenizer (mxdp prepare writes "
             "train.bin and val.bin together)");
}

std::string human_time(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  int64_t t = int64_t(s + 0.5);
  if (t >= 3600) return ::fmt::format("{}h{:02d}m", t / 3600, (t / 60) % 60);
  if (t >= 60) return ::fmt::format("{}m{:02d}s", t / 60, t % 60);
  return ::fmt::format("{}s", t);
}

std::string human_rate(double r) {
  if (r >= 1e6) return ::fmt::format("{:.2f}M", r / 1e6);
  if (r >= 1e3) return ::fmt::format("{:.1f}k", r / 1e3);
  return ::fmt::format("{:.0f}", r);
}

// "854.4 MFLOP", "8.22 GFLOP": four significant digits.
std::string human_flops(double f) {
  if (f >= 1e9) return ::fmt::format("{:.4g} GFLOP", f / 1e9);
  if (f >= 1e6) return ::fmt::format("{:.4g} MFLOP", f / 1e6);
  if (f >= 1e3) return ::fmt::format("{:.4g} kFLOP", f / 1e3);
  return ::fmt::format("{:.4g} FLOP", f);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

class Trainer {
 public:
  Trainer(const TrainConfig& cfg, Communicator& comm)
      : cfg_(cfg), comm_(comm), rank_(comm.rank()), dp_(comm.size()), is_lead_(rank_ == 0) {}
  int run();

 private:
  // Set-up, in this order.
  void check_options();
  void open_save_dir();
  void set_threads();
  void open_data();
  void read_resume_point();
  void resolve_schedule();
  bool auto_run_finished();
  bool nothing_to_train();
  void build_engine();
  void check_finite_init();
  void resume();
  void note_changed_settings(const json& extra);
  void print_header();
  void clean_save_dir();
  void open_metrics();
  // The run.
  void run_eval(int64_t step);
  int train_steps();  // 0, or 128 + the signal that stopped it
  int stop_for_signal(int64_t done, int sig);
  void submit_step();  // the micro-batches' forward and backward, then the step, launched
  void report_step(int64_t step, int64_t first, const StepResult& r, double seconds);
  double mfu(double tokens_per_s) const;
  void resolve_peak();
  void check_divergence(int64_t step, const StepResult& r);
  void save(int64_t step);
  void final_sample();
  void finish();
  // Rank 0's work, with its errors thrown on every rank.
  void lead(const std::function<void()>& fn);
  void emit(const json& j);
  void println(const std::string& s);
  void broadcast_text(std::string& s);
  double now() const { return cfg_.clock ? cfg_.clock() : steady_seconds(); }
  void phase(const char* p, int64_t step) const {
    if (cfg_.on_phase) cfg_.on_phase(p, step);
  }

  TrainConfig cfg_;
  Communicator& comm_;
  const int rank_, dp_;
  const bool is_lead_;
  ModelConfig mc_;
  Device device_ = Device::Cpu;
  std::unique_ptr<EngineOps> ops_;
  std::string data_dir_;
  std::string tokenizer_dir_;  // where the data's tokenizer.json would be
  std::unique_ptr<TokenDataset> train_ds_, val_ds_;
  std::unique_ptr<DataLoader> loader_;
  std::unique_ptr<EvalLoader> eval_loader_;
  std::unique_ptr<LanguageModel> model_;
  std::unique_ptr<DataParallel> engine_;
  // Resuming.
  bool load_auto_found_ = false;  // --load auto found a checkpoint in --save-dir
  std::string load_path_;
  int64_t start_step_ = 0;
  json ckpt_extra_ = json::object();
  Schedule schedule_;
  // Output.
  SaveDirLock lock_;  // rank 0's, for the job's life
  File metrics_;
  bool tty_ = false, progress_open_ = false;
  // Run state.
  std::vector<OwnedBatch> eval_data_, micro_;
  double last_eval_ = NAN, last_loss_ = NAN;
  std::unique_ptr<StepTimer> timer_;
  std::optional<ThroughputMeter> meter_;
  double flops_per_token_ = 0;  // the model's training FLOPs a token (ModelSpec::train_flops_per_token)
  double peak_tflops_ = 0;      // a rank's peak MFU is measured against (0: no MFU; resolve_peak)
  std::string peak_from_;       // where it came from, for the header
  bool paused_ = true;      // an eval, a save or the start since the last step
  int64_t saved_step_ = -1;  // the step of this run's last save
  int consecutive_skipped_ = 0;
  int64_t skipped_total_ = 0;  // steps of this run skipped for non-finite gradients
};

int Trainer::run() {
  const ShutdownSignals signals(is_lead_);
  on_every_rank(comm_, [&] { check_options(); });  // every rank finds the same: one reports it
  open_save_dir();
  set_threads();
  device_ = resolve_device(cfg_.device);
  ops_ = make_engine_ops(device_);
  resolve_peak();
  open_data();
  read_resume_point();
  resolve_schedule();
  if (auto_run_finished()) return 0;
  const bool eval_only = nothing_to_train();
  build_engine();
  resume();
  print_header();
  clean_save_dir();
  open_metrics();
  int code = 0;
  if (eval_only) {
    run_eval(start_step_);
    println(::fmt::format("note: --steps {} is not beyond step {}: this run evaluates and trains nothing", cfg_.steps,
                          start_step_));
  } else {
    if (cfg_.eval_first) run_eval(start_step_);
    code = train_steps();
  }
  if (code == 0) final_sample();
  finish();
  return code;
}

// ---- set-up ----------------------------------------------------------------------

void Trainer::check_options() {
  MXDP_CHECK(cfg_.init_from.empty() || cfg_.load.empty(),
             "--init-from starts a run from given weights, --load resumes one: pass one of them");
  mc_ = resolve_model(cfg_);
  cfg_.dp.bucket_size = cfg_.dp.bucket_elems(dp_);  // auto: the size it makes at this dp, in the header
  // Refused here, before any data is prepared or directory made, as plan does.
  compute_param_specs(mc_, cfg_.dp, cfg_.model);
  MXDP_CHECK(cfg_.steps >= 0, "--steps must be >= 0, got ", cfg_.steps);
  MXDP_CHECK(cfg_.batch_size >= 1, "--batch-size must be >= 1, got ", cfg_.batch_size);
  const int max_seq = mc_.spec().max_seq(mc_);
  MXDP_CHECK(cfg_.seq_len >= 1 && cfg_.seq_len <= max_seq, "--seq-len must be in [1, ", max_seq,
             "] (the model's max_seq), got ", cfg_.seq_len);
  MXDP_CHECK(cfg_.eval_every >= 0 && cfg_.eval_batches >= 1 && cfg_.eval_passes >= 1,
             "--eval-every must be >= 0, --eval-batches and --eval-passes >= 1");
  MXDP_CHECK(cfg_.save_every >= 0, "--save-every must be >= 0, got ", cfg_.save_every);
  MXDP_CHECK(cfg_.save_every == 0 || !cfg_.save_dir.empty(), "--save-every needs --save-dir");
  MXDP_CHECK(cfg_.keep_last >= 0, "--keep-last must be >= 0 (0 = keep every checkpoint), got ", cfg_.keep_last);
  MXDP_CHECK(cfg_.keep_last == 0 || !cfg_.save_dir.empty(), "--keep-last needs --save-dir");
  MXDP_CHECK(cfg_.max_skipped_steps >= 0, "--max-skipped-steps must be >= 0 (0 = never stop), got ",
             cfg_.max_skipped_steps);
  MXDP_CHECK(cfg_.progress == "auto" || cfg_.progress == "bar" || cfg_.progress == "lines",
             "--progress must be auto, bar or lines, got '", cfg_.progress, "'");
  MXDP_CHECK(cfg_.log_every >= 1, "--log-every must be >= 1, got ", cfg_.log_every);
  MXDP_CHECK(std::isfinite(cfg_.peak_tflops) && cfg_.peak_tflops >= 0,
             "--peak-tflops must be >= 0 (0 = no MFU; e.g. 989 for an H100 or H200 SXM's dense bf16), got ",
             cfg_.peak_tflops);
  for (auto [name, v] : {std::pair{"--n-layer", cfg_.n_layer}, {"--n-head", cfg_.n_head}, {"--d-model", cfg_.d_model},
                         {"--max-seq", cfg_.max_seq}, {"--vocab", cfg_.vocab}})
    MXDP_CHECK(v >= 0, name, " must be >= 0 (0 = the named config's), got ", v);
  MXDP_CHECK(cfg_.threads >= 0 && cfg_.threads <= 4096, "--threads must be in [0, 4096] (0 = cores / ranks), got ",
             cfg_.threads);
  MXDP_CHECK(cfg_.dp.lr_decay_steps >= -1, "--lr-decay-steps must be >= -1 (-1 = --steps, 0 = no decay), got ",
             cfg_.dp.lr_decay_steps);
  MXDP_CHECK(cfg_.load != "auto" || !cfg_.save_dir.empty(),
             "--load auto resumes from the latest checkpoint of --save-dir: pass --save-dir");
  MXDP_CHECK(!cfg_.start_over || cfg_.load.empty() || cfg_.load == "auto",
             "--start-over trains from scratch, --load resumes: pass one of them");
  MXDP_CHECK(!cfg_.start_over || !cfg_.save_dir.empty(), "--start-over needs --save-dir");
  meter_.emplace(double(cfg_.batch_size) * cfg_.seq_len * dp_ * cfg_.dp.micro_batches);
  flops_per_token_ = mc_.spec().train_flops_per_token(mc_, cfg_.seq_len);
}

void Trainer::open_save_dir() {
  if (cfg_.save_dir.empty()) return;
  const std::string& dir = cfg_.save_dir;
  // Before any work: rank 0 creates, probes and locks it, then the others probe it.
  on_every_rank(comm_, [&] {
    if (!is_lead_) return;
    probe_save_dir(dir);
    lock_ = SaveDirLock::acquire(dir);
  });
  on_every_rank(comm_, [&] {
    if (!is_lead_) probe_save_dir(dir);
  });
  std::string newest;
  lead([&] { newest = newest_checkpoint_in(dir); });
  broadcast_text(newest);
  if (cfg_.load == "auto") {
    load_auto_found_ = !newest.empty();
    cfg_.load = newest.empty() ? "" : dir;
    if (newest.empty()) println(::fmt::format("--load auto: no checkpoint in {} yet: a fresh run", dir));
  }
  if (!cfg_.load.empty() || newest.empty()) return;
  MXDP_CHECK(cfg_.start_over, "--save-dir '", dir, "' already holds checkpoints (the latest: ", newest,
             ") and this run starts from scratch, so it would replace them. Pass --load ", dir,
             " (or --load auto) to resume from ", newest, ", or --start-over to train from scratch and remove them");
  lead([&] {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (checkpoint_step(name) < 0 && name != "latest") continue;
      fs::remove_all(e.path(), ec);
      MXDP_CHECK(!ec, "--start-over: cannot remove '", e.path().string(), "': ", ec.message());
      std::printf("removed %s (--start-over)\n", e.path().c_str());
    }
    sync_directory(dir);
    std::fflush(stdout);
  });
}

void Trainer::set_threads() {
  if (cfg_.threads <= 0) {
    const int per_node = std::max(1, this_launch().local_size);  // ranks of this host, from any launcher
    cfg_.threads = std::max(1, int(std::thread::hardware_concurrency()) / per_node);
  }
  omp_set_num_threads(cfg_.threads);
}

void Trainer::open_data() {
  MXDP_CHECK(!cfg_.data.empty(), "no training data: pass --data DIR (made by `mxdp prepare`) or a text file");
  std::error_code ec;
  if (const std::optional<LlmcShardSet> llmc = find_llmc_shards(cfg_.data)) {  // llm.c shards, read as they are
    data_dir_ = cfg_.data;
    tokenizer_dir_ = fs::path(llmc->train[0]).parent_path().string();
    train_ds_ = std::make_unique<TokenDataset>(llmc->train);
    val_ds_ = std::make_unique<TokenDataset>(llmc->val);
  } else if (fs::is_directory(cfg_.data, ec)) {
    data_dir_ = cfg_.data;
  } else {
    MXDP_CHECK(fs::is_regular_file(cfg_.data, ec), "--data '", cfg_.data, "' is neither a directory nor a file");
    // A text file is prepared beside it, once per content (data.h).
    lead([&] { prepare_cached(cfg_.data, 0.1, stdout); });
    data_dir_ = prepared_dir(cfg_.data);
  }
  if (!train_ds_) {
    tokenizer_dir_ = data_dir_;
    train_ds_ = std::make_unique<TokenDataset>((fs::path(data_dir_) / "train.bin").string());
    val_ds_ = std::make_unique<TokenDataset>((fs::path(data_dir_) / "val.bin").string());
  }
  const int vocab = mc_.spec().vocab(mc_);
  MXDP_CHECK(int(train_ds_->vocab_size()) <= vocab, "the data's vocab (", train_ds_->vocab_size(),
             ") is larger than the model's (", vocab, "): pass --vocab ", train_ds_->vocab_size());
  loader_ = std::make_unique<DataLoader>(*train_ds_, cfg_.batch_size, cfg_.seq_len, rank_, dp_, cfg_.seed);
  if (cfg_.eval_every == 0 && !cfg_.eval_first) return;  // never evaluates: val.bin may be anything
  check_same_tokenizer(*train_ds_, *val_ds_);
  const int max_eval = EvalLoader::max_batches(val_ds_->size(), cfg_.batch_size, cfg_.seq_len, dp_);
  MXDP_CHECK(max_eval >= 1, "val.bin (", val_ds_->size(), " tokens) is too small for one eval batch of ", dp_, " x ",
             cfg_.batch_size, " x ", cfg_.seq_len + 1, " tokens");
  if (cfg_.eval_batches > max_eval) {
    if (is_lead_)
      std::printf("note: --eval-batches %d lowered to %d, all that val.bin holds\n", cfg_.eval_batches, max_eval);
    cfg_.eval_batches = max_eval;
  }
  eval_loader_ = std::make_unique<EvalLoader>(*val_ds_, cfg_.batch_size, cfg_.seq_len, rank_, dp_, cfg_.eval_batches);
}

void Trainer::read_resume_point() {
  if (cfg_.load.empty()) return;
  // Rank 0 finds and reads the checkpoint's metadata; every rank gets it.
  std::string text;
  lead([&] {
    load_path_ = resolve_checkpoint(cfg_.load);
    const CheckpointInfo info = read_checkpoint_info(load_path_);
    text = json{{"path", load_path_}, {"iteration", info.iteration}, {"extra", info.extra}}.dump();
  });
  broadcast_text(text);
  const json j = json::parse(text);
  load_path_ = j["path"].get<std::string>();
  start_step_ = j["iteration"].get<int64_t>();
  ckpt_extra_ = j["extra"];
  MXDP_CHECK(records_model_config(ckpt_extra_, mc_), load_path_, ": checkpoint was written for model ",
             ckpt_extra_.value("model", json()).dump(), " but this run builds ", mc_.config.dump());
  MXDP_CHECK(ckpt_extra_.contains("data"), load_path_, ": checkpoint has no data position");
}

void Trainer::resolve_schedule() {
  DpOptions& o = cfg_.dp;
  Schedule cli;
  const TrainConfig::ScheduleGiven& g = cfg_.schedule_given;
  if (cfg_.lr_follows_model && !g.lr) cli.lr_default_for_d_model = mc_.spec().d_model(mc_);
  cli.lr = cli.lr_default_for_d_model > 0 ? default_peak_lr(cli.lr_default_for_d_model) : o.lr;
  cli.min_lr = cfg_.lr_follows_model && !g.min_lr ? default_min_lr(cli.lr) : o.min_lr;
  cli.warmup_steps = o.warmup_steps;
  // The default (-1) ends the cosine at --steps; a run that ends inside the
  // warmup records it as not fixed yet (-1), so that a longer resumed run
  // decays to its own --steps instead of holding the peak lr.
  cli.lr_decay_steps = o.lr_decay_steps >= 0 ? o.lr_decay_steps : (cfg_.steps > o.warmup_steps ? cfg_.steps : -1);
  cli.source = "command line";
  if (load_path_.empty() || !ckpt_extra_.contains("schedule")) {
    schedule_ = cli;
  } else if (cfg_.override_schedule) {
    schedule_ = cli;
    schedule_.source = "override";
  } else {
    // Megatron's rule: a schedule option given on the command line must agree
    // with the checkpoint's; what is not given continues the checkpoint's.
    schedule_ = schedule_from(ckpt_extra_["schedule"], load_path_);
    // Not fixed yet by the checkpoint's run: this run's --lr-decay-steps (or --steps) fixes it.
    if (schedule_.lr_decay_steps < 0) schedule_.lr_decay_steps = cli.lr_decay_steps;
    std::string diff;
    auto differs = [&](bool given, const char* name, double mine, double theirs) {
      if (given && mine != theirs) diff += ::fmt::format("{}{} {} (the checkpoint's: {})", diff.empty() ? "" : ", ", name, mine, theirs);
    };
    differs(g.lr, "lr", cli.lr, schedule_.lr);
    differs(g.min_lr, "min_lr", cli.min_lr, schedule_.min_lr);
    differs(g.warmup_steps, "warmup_steps", double(cli.warmup_steps), double(schedule_.warmup_steps));
    differs(g.lr_decay_steps, "lr_decay_steps", double(cli.lr_decay_steps), double(schedule_.lr_decay_steps));
    MXDP_CHECK(diff.empty(), "--load '", load_path_, "': the command line sets ", diff,
               ". A resumed run continues the checkpoint's schedule; pass --override-schedule to use the command "
               "line's schedule from step ", start_step_ + 1, " on, or leave these options out");
  }
  o.lr = schedule_.lr;
  o.min_lr = schedule_.min_lr;
  o.warmup_steps = schedule_.warmup_steps;
  o.lr_decay_steps = schedule_.decay_end(cfg_.steps);
  o.validate(dp_);
}

// --load auto, which a requeued job (SLURM, torchrun restarts) repeats
// unchanged: it resumes, or its run already reached --steps and there is
// nothing to do, which is no error (an explicit --load there is one).
bool Trainer::auto_run_finished() {
  if (!load_auto_found_) return false;
  const bool finished = cfg_.steps <= start_step_;
  println(finished ? ::fmt::format("nothing to do: {}'s latest checkpoint is at step {}, --steps {}", cfg_.save_dir,
                                   start_step_, cfg_.steps)
                   : ::fmt::format("--load auto: resuming from {}", load_path_));
  return finished;
}

bool Trainer::nothing_to_train() {
  if (cfg_.steps > start_step_) return false;
  if (!cfg_.eval_first) {
    if (load_path_.empty())
      MXDP_FAIL("--steps ", cfg_.steps, ": nothing to train (pass --steps N >= 1, or add --eval-first to only "
                "evaluate the initial weights)");
    MXDP_FAIL("--steps ", cfg_.steps, ": nothing to train: '", load_path_, "' is already at step ", start_step_,
              " (pass --steps > ", start_step_, " to train on, or add --eval-first to only evaluate it)");
  }
  return true;
}

void Trainer::build_engine() {
  model_ = make_model(device_, mc_, *ops_);
  model_->init_weights(cfg_.seed);
  model_->set_fp8_compute(cfg_.dp.model_fp8_compute());
  if (!cfg_.init_from.empty()) {
    mc_.spec().hf_import(*model_, cfg_.init_from);
    check_finite_init();
  }
  engine_ = std::make_unique<DataParallel>(*model_, comm_, cfg_.dp, ops_.get());
}

// A NaN or Inf given as a weight would only show later as skipped steps.
void Trainer::check_finite_init() {
  std::vector<float> host;
  const std::vector<ParamSpec>& ps = model_->params();
  for (size_t i = 0; i < ps.size(); ++i) {
    host.resize(size_t(ps[i].numel()));
    ops_->copy_to_host(host.data(), model_->initial_weights(int(i)), host.size() * sizeof(float));
    for (size_t k = 0; k < host.size(); ++k)
      MXDP_CHECK(std::isfinite(host[k]), "--init-from '", cfg_.init_from, "': tensor '", ps[i].name, "' holds ",
                 host[k], " at element ", k, " (of ", host.size(), "): the weights must be finite");
  }
}

void Trainer::resume() {
  if (load_path_.empty()) return;
  const json extra = engine_->load_checkpoint(load_path_);
  MXDP_CHECK(engine_->iteration() == start_step_, load_path_, ": loaded step ", engine_->iteration(),
             " but its metadata said ", start_step_, " (was it replaced meanwhile?)");
  loader_->set_state(extra["data"].get<DataLoaderState>());
  if (is_lead_) std::printf("loaded %s: step %lld\n", load_path_.c_str(), (long long)start_step_);
  note_changed_settings(extra);
}

// The gather and compute settings a checkpoint records (what sample/export
// rebuild the trained weights with, and what a resumed run compares), in the
// order a resumed run names them.
std::vector<std::pair<const char*, json>> format_settings(const DpOptions& o) {
  return {{"weight_format", to_string(o.weight_format)},
          {"compute_dtype", to_string(o.compute_dtype)},
          {"num_layers_at_start_in_bf16", o.num_layers_at_start_in_bf16},  // 0 unless compute_dtype fp8 (validate)
          {"num_layers_at_end_in_bf16", o.num_layers_at_end_in_bf16},
          {"mxfp8_scale_rounding", to_string(o.mxfp8_scale_rounding)}};
}

// A run may resume under other gather or compute settings than its checkpoint
// was trained with (the checkpoint holds fp32 masters and AdamW state, which
// every setting reads alike); it says so once, since its steps from here are
// not those of the checkpoint's own settings. Keys an older checkpoint lacks
// are not compared.
void Trainer::note_changed_settings(const json& extra) {
  const auto text = [](const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  std::string theirs, ours;
  for (const auto& [key, value] : format_settings(cfg_.dp)) {
    if (!extra.contains(key) || extra[key] == value) continue;
    theirs += ::fmt::format("{}{} {}", theirs.empty() ? "" : ", ", key, text(extra[key]));
    ours += ::fmt::format("{}{} {}", ours.empty() ? "" : ", ", key, text(value));
  }
  if (theirs.empty()) return;
  println(::fmt::format("note: {} was trained with {}; this run goes on with {}. The master weights and AdamW "
                        "state carry over; the steps from here are not those its own settings would give",
                        load_path_, theirs, ours));
}

// The header's keys are padded to 27 characters, the longest's (num_layers_at_start_in_bf16).
void Trainer::print_header() {
  if (!is_lead_) return;
  // The first line names the launcher found (comm/launcher.h); the next its details.
  const Launcher launcher = this_launch().launcher;
  const std::string by = launcher == Launcher::None ? "" : std::string(" started by ") + launcher_name(launcher);
  if (device_ == Device::Cuda)
    std::printf("mxdp train: %d rank%s%s (%s), one GPU per rank\n", dp_, dp_ > 1 ? "s" : "", by.c_str(),
                backend_name(comm_.backend()));
  else
    std::printf("mxdp train: %d rank%s%s (%s), %d thread%s per rank\n", dp_, dp_ > 1 ? "s" : "", by.c_str(),
                backend_name(comm_.backend()), cfg_.threads, cfg_.threads > 1 ? "s" : "");
  auto line = [](const char* k, const std::string& v) { std::printf("  %-27s = %s\n", k, v.c_str()); };
  line("launcher", launch_description());
  const ModelSpec& spec = mc_.spec();
  line("model", ::fmt::format("{} ({}): {} params, {} a trained token at seq_len {}", cfg_.model,
                              spec.describe(mc_), spec.num_parameters(mc_), human_flops(flops_per_token_),
                              cfg_.seq_len));
  if (peak_tflops_ > 0)
    line("peak_tflops", ::fmt::format("{:g} a rank, {} (MFU: the model's FLOPs a second over {:g} TFLOP/s)",
                                      peak_tflops_, peak_from_, peak_tflops_ * dp_));
  line("data", ::fmt::format("{} (train {} tokens, val {} tokens)", data_dir_, train_ds_->size(), val_ds_->size()));
  line("steps", std::to_string(cfg_.steps));
  line("batch_size", ::fmt::format("{} per rank x {} ranks x {} micro-batches = {} sequences/step", cfg_.batch_size,
                                   dp_, cfg_.dp.micro_batches, cfg_.batch_size * dp_ * cfg_.dp.micro_batches));
  line("seq_len", std::to_string(cfg_.seq_len));
  line("seed", std::to_string(cfg_.seed));
  const std::string from = schedule_.source == "checkpoint" ? "from the checkpoint"
                           : schedule_.source == "override"
                               ? "from the command line (--override-schedule: the checkpoint's is replaced)"
                               : "from the command line";
  std::string lr_from;  // where the peak lr came from, when no --lr set it
  if (schedule_.lr_default_for_d_model > 0)
    lr_from = schedule_.source == "checkpoint"
                  ? ::fmt::format(" (its peak lr was the default for d_model {})", schedule_.lr_default_for_d_model)
                  : ::fmt::format(" (the peak lr is the default for d_model {}; --lr sets another)",
                                  schedule_.lr_default_for_d_model);
  line("schedule", from + ": " + schedule_.describe(start_step_ + 1, cfg_.steps) + lr_from);
  line("eval_every", ::fmt::format("{} ({} batches, {} pass{}{})", cfg_.eval_every, cfg_.eval_batches, cfg_.eval_passes,
                                   cfg_.eval_passes > 1 ? "es" : "", cfg_.eval_first ? ", also before the first step" : ""));
  line("save", cfg_.save_dir.empty()  ? "off"
               : cfg_.save_every == 0 ? ::fmt::format("after the last step to {}", cfg_.save_dir)
                                      : ::fmt::format("every {} steps and after the last to {}", cfg_.save_every,
                                                      cfg_.save_dir));
  line("keep_last", cfg_.keep_last == 0 ? "all checkpoints" : ::fmt::format("the newest {}", cfg_.keep_last));
  line("max_skipped_steps", cfg_.max_skipped_steps == 0 ? "never stop"
                                                        : ::fmt::format("stop after {} in a row", cfg_.max_skipped_steps));
  line("load", load_path_.empty() ? "-" : load_path_);
  line("init_from", cfg_.init_from.empty() ? "-" : cfg_.init_from);
  line("metrics", cfg_.metrics.empty() ? "-" : cfg_.metrics);
  for (auto& [k, v] : cfg_.dp.describe()) line(k.c_str(), v);
  std::fflush(stdout);
  tty_ = cfg_.progress == "bar" ||
         (cfg_.progress == "auto" && ::isatty(STDOUT_FILENO) && !std::getenv("OMPI_COMM_WORLD_SIZE"));
}

// Under the save directory's lock: whoever wrote these temporaries is gone.
void Trainer::clean_save_dir() {
  if (cfg_.save_dir.empty()) return;
  lead([&] {
    for (const std::string& name : remove_stale_temporaries(cfg_.save_dir))
      std::printf("removed %s: left by an interrupted save\n", (fs::path(cfg_.save_dir) / name).c_str());
    std::fflush(stdout);
  });
}

void Trainer::open_metrics() {
  if (cfg_.metrics.empty()) return;
  lead([&] {
    // A line an earlier run's end cut short would glue this run's first line onto it.
    const uint64_t cut = load_path_.empty() ? 0 : drop_partial_last_line(cfg_.metrics);
    if (cut > 0)
      std::printf("note: %s ended in a partial line (%llu bytes, cut off when an earlier run ended): dropped it\n",
                  cfg_.metrics.c_str(), (unsigned long long)cut);
    metrics_ = File::create(cfg_.metrics, /*append=*/!load_path_.empty());
  });
  // First line of a run (and of each resumed part): what produced the lines below.
  json opts = json::object();
  for (auto& [k, v] : cfg_.dp.describe()) opts[k] = v;
  emit({{"kind", "config"}, {"step", start_step_}, {"ranks", dp_}, {"model", mc_.config}, {"data", data_dir_},
        {"batch_size", cfg_.batch_size}, {"seq_len", cfg_.seq_len}, {"seed", cfg_.seed}, {"steps", cfg_.steps},
        {"schedule", schedule_.to_json()}, {"options", opts}, {"train_flops_per_token", flops_per_token_},
        {"peak_tflops", peak_tflops_}});
}

// ---- the run -------------------------------------------------------------------------

void Trainer::run_eval(int64_t step) {
  eval_loader_->reset();
  eval_data_.resize(size_t(cfg_.eval_batches));
  std::vector<Batch> batches;
  for (auto& ob : eval_data_) {
    Batch b;
    MXDP_CHECK(eval_loader_->next(b), "eval loader ran out of batches");
    ob.take(b);
    batches.push_back(ob.batch);
  }
  const double t0 = now();
  phase("eval", step);
  double loss = 0;
  for (int p = 0; p < cfg_.eval_passes; ++p) {
    // Each pass is a full eval through the freshness chain, emitted on its own line.
    const double l = engine_->eval(batches);
    emit({{"kind", "eval"}, {"step", step}, {"loss", l}, {"pass", p + 1}});
    if (p == 0) loss = l;
    MXDP_CHECK(std::memcmp(&l, &loss, sizeof loss) == 0, "eval pass ", p + 1, " at step ", step, " gave loss ", l,
               " but pass 1 gave ", loss, ": the weights changed between passes");
  }
  last_eval_ = loss;
  const double took = now() - t0;
  meter_->add_eval(took);
  println(::fmt::format("eval  step {:>6} | loss {:.4f} | {:.2f}s", step, loss, took));
}

void Trainer::submit_step() {
  micro_.resize(size_t(cfg_.dp.micro_batches));
  for (auto& ob : micro_) {
    Batch b;
    loader_->next(b);
    ob.take(b);
    engine_->forward_backward(ob.batch);
  }
  engine_->launch_step();
}

int Trainer::train_steps() {
  const int64_t first = start_step_ + 1;
  const auto start = std::chrono::steady_clock::now();
  timer_ = device_ == Device::Cuda ? make_cuda_step_timer(ops_->stream()) : make_host_step_timer(cfg_.clock);
  int64_t reported = start_step_;
  const auto report_results = [&](int keep) {
    while (engine_->results_pending() > keep) {
      const StepResult r = *engine_->take_result(true);
      ++reported;
      report_step(reported, first, r, timer_->seconds(reported));
      check_divergence(reported, r);
    }
  };
  for (int64_t step = first; step <= cfg_.steps; ++step) {
    // At each step boundary the ranks agree whether any of them caught a signal.
    if (const int sig = agreed_signal(comm_, ShutdownSignals::caught())) {
      report_results(0);
      return stop_for_signal(step - 1, sig);
    }
    timer_->begin(step, paused_);
    paused_ = false;
    phase("step", step);
    submit_step();
    timer_->end(step);
    const bool last = step == cfg_.steps;
    const bool eval_now = cfg_.eval_every > 0 && (step % cfg_.eval_every == 0 || last);
    const bool save_now = !cfg_.save_dir.empty() && ((cfg_.save_every > 0 && step % cfg_.save_every == 0) || last);
    // Each result is read one step late: the host prepares and submits step
    // N+1 while the GPU still runs step N. Before an eval or a save, all of them.
    report_results(eval_now || save_now || last ? 0 : 1);
    if (eval_now) run_eval(step);
    if (save_now) save(step);
    if (eval_now || save_now) paused_ = true;
  }
  report_results(0);
  if (progress_open_) println("");
  if (is_lead_)
    std::printf("done: %lld steps in %s, final train loss %.4f%s\n", (long long)(cfg_.steps - first + 1),
                human_time(seconds_since(start)).c_str(), last_loss_,
                std::isnan(last_eval_) ? "" : ::fmt::format(", final eval loss {:.4f}", last_eval_).c_str());
  return 0;
}

// Every rank, at the same step boundary: step `done` is finished and reported.
int Trainer::stop_for_signal(int64_t done, int sig) {
  if (progress_open_) println("");
  std::string what;
  if (done <= start_step_) {
    what = "no step was trained, nothing to save";
  } else if (cfg_.save_dir.empty()) {
    what = ::fmt::format("nothing saved (no --save-dir): the {} steps of this run are lost", done - start_step_);
  } else {
    if (saved_step_ != done) save(done);
    what = ::fmt::format("saved {}; resume with --load {}", checkpoint_path(cfg_.save_dir, done), cfg_.save_dir);
  }
  println(::fmt::format("stopped by {} after step {}: {}", signal_name(sig), done, what));
  return 128 + sig;
}

void Trainer::report_step(int64_t step, int64_t first, const StepResult& r, double seconds) {
  meter_->add_step(seconds);
  const double rate = meter_->rate(seconds);
  // Still to come after this report: the steps after it, and the evals and
  // saves from its own on (an eval or save at `step` runs after its report).
  const int64_t evals_left = cfg_.eval_every > 0 ? events_left(step - 1, cfg_.steps, cfg_.eval_every, true) : 0;
  const int64_t saves_left = cfg_.save_dir.empty() ? 0 : events_left(step - 1, cfg_.steps, cfg_.save_every, true);
  const double eta = meter_->eta(cfg_.steps - step, evals_left, saves_left);
  last_loss_ = r.loss;
  json line = {{"kind", "train"}, {"step", step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
               {"tokens_per_s", rate}, {"step_s", seconds}, {"eta_s", eta}, {"skipped", r.skipped}};
  if (peak_tflops_ > 0) line["mfu"] = mfu(rate);
  emit(line);
  skipped_total_ += r.skipped ? 1 : 0;
  if (r.skipped)
    println(::fmt::format("step {}: non-finite gradients (norm {}), update skipped; {} skipped so far", step,
                          r.grad_norm, skipped_total_));
  const std::string mfu_part =
      peak_tflops_ > 0 ? ::fmt::format(" | MFU {:.1f}%", 100.0 * mfu(meter_->smoothed_rate())) : "";
  const std::string prog = ::fmt::format("step {:>6}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {} tok/s{} | ETA {}",
                                         step, cfg_.steps, r.loss, r.lr, r.grad_norm,
                                         human_rate(meter_->smoothed_rate()), mfu_part,
                                         meter_->steady() || step == cfg_.steps ? human_time(eta) : "--");
  if (!is_lead_) return;
  if (tty_) {
    std::printf("\r\033[K%s", prog.c_str());
    std::fflush(stdout);
    progress_open_ = true;
  } else if (step % cfg_.log_every == 0 || step == first || step == cfg_.steps) {
    println(prog);
  }
}

// The peak MFU is measured against: --peak-tflops, else on a GPU its dense
// bf16 peak looked up by its name (none for a name the table does not list).
void Trainer::resolve_peak() {
  peak_tflops_ = cfg_.peak_tflops;
  if (peak_tflops_ > 0) {
    peak_from_ = "from --peak-tflops";
    return;
  }
  const std::string name = device_name(device_);
  peak_tflops_ = dense_bf16_peak_tflops(name);
  if (peak_tflops_ > 0) peak_from_ = "the dense bf16 peak of an " + name + " (--peak-tflops sets another)";
}

// The model's training FLOPs a second at `tokens_per_s` (all ranks), over
// the peak of the dp_ ranks' devices.
double Trainer::mfu(double tokens_per_s) const {
  return tokens_per_s * flops_per_token_ / (peak_tflops_ * 1e12 * dp_);
}

void Trainer::check_divergence(int64_t step, const StepResult& r) {
  consecutive_skipped_ = r.skipped ? consecutive_skipped_ + 1 : 0;
  const int n = consecutive_skipped_;
  if (cfg_.max_skipped_steps == 0 || n < cfg_.max_skipped_steps) return;
  // The same StepResult on every rank: every rank stops here.
  MXDP_FAIL("the run diverged: ", n, " consecutive steps (", step - n + 1, " to ", step,
            ") had non-finite gradients and were skipped (--max-skipped-steps ", cfg_.max_skipped_steps,
            "); the weights are those of step ", step - n,
            ". Resume from an earlier checkpoint with a lower --lr (and --override-schedule)");
}

void Trainer::save(int64_t step) {
  const double t0 = now();
  phase("save", step);
  const std::string path = checkpoint_path(cfg_.save_dir, step);
  json sched = schedule_.to_json();
  sched.erase("source");
  sched["steps"] = cfg_.steps;
  json extra = {{"data", loader_->state()}, {"seed", cfg_.seed}, {"schedule", sched},
                // what sample/export rebuild the trained weights with
                {"embedding_format", to_string(embedding_format(cfg_.dp.weight_format))},
                {"data_vocab", train_ds_->vocab_size()}};  // <= 256: bytes (sample needs no tokenizer)
  for (const auto& [key, value] : format_settings(cfg_.dp)) extra[key] = value;
  record_model_config(extra, mc_);  // "model" (and "arch" for an architecture other than gpt2)
  engine_->save_checkpoint(path, extra);  // refuses a non-finite state on every rank
  std::vector<std::string> removed;
  lead([&] {
    write_file_atomic((fs::path(cfg_.save_dir) / "latest").string(), checkpoint_name(step) + "\n");
    removed = remove_old_checkpoints(cfg_.save_dir, cfg_.keep_last, checkpoint_name(step));
  });
  println("saved " + path);
  for (const std::string& name : removed)
    println(::fmt::format("removed {} (--keep-last {})", (fs::path(cfg_.save_dir) / name).string(), cfg_.keep_last));
  saved_step_ = step;
  meter_->add_save(now() - t0);
}

// Inference on the weights sync_weights left in place: no freshness step, no
// gradients; under FP8 compute the linear layers' W comes from the engine.
class SyncedHooks final : public NullHooks {
 public:
  explicit SyncedHooks(DataParallel& dp) : dp_(dp) {}
  Fp8Weight fp8_weight(int param) override { return dp_.fp8_weight(param); }

 private:
  DataParallel& dp_;
};

void Trainer::final_sample() {
  if (cfg_.sample_tokens <= 0) return;
  engine_->sync_weights();  // collective: the model now holds the latest weights
  if (!is_lead_) return;
  SampleOptions so;
  so.tokens = cfg_.sample_tokens;
  so.seed = cfg_.seed;
  SyncedHooks hooks(*engine_);
  print_run_sample(*model_, *data_tokenizer(tokenizer_dir_), train_ds_->vocab_size(), cfg_.sample_prompt, so, &hooks);
  std::fflush(stdout);
}

void Trainer::finish() {
  if (!cfg_.metrics.empty()) lead([&] { metrics_.close(); });
  comm_.barrier();
}

// ---- rank 0 --------------------------------------------------------------------------

void Trainer::lead(const std::function<void()>& fn) {
  on_rank0(comm_, fn, [&](void* p, size_t n) { comm_.host_broadcast(p, n, 0); });
}

void Trainer::emit(const json& j) {
  if (cfg_.metrics.empty()) return;
  // Every rank takes part, so that a failed write stops all of them together.
  lead([&] {
    const std::string line = j.dump() + "\n";
    metrics_.write(line.data(), line.size());
  });
}

void Trainer::broadcast_text(std::string& s) {
  uint64_t n = s.size();
  comm_.host_broadcast(&n, sizeof n, 0);
  s.resize(size_t(n));
  comm_.host_broadcast(s.data(), s.size(), 0);
}

void Trainer::println(const std::string& s) {
  if (!is_lead_) return;
  if (progress_open_) std::printf("\r\033[K");
  progress_open_ = false;
  std::printf("%s\n", s.c_str());
  std::fflush(stdout);
}

}  // namespace

int train(const TrainConfig& cfg, Communicator& comm) {
  Trainer t(cfg, comm);
  return t.run();
}

}  // namespace mxdp
