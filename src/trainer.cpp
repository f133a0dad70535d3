#include "trainer.h"

#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <functional>
#include <thread>
#include <nlohmann/json.hpp>

#include "check.h"
#include "checkpoint.h"
#include "data.h"
#include "engine.h"
#include "hf_gpt2.h"
#include "llmc_shards.h"
#include "runtime.h"
#include "sample.h"

namespace mxdp {

namespace fs = std::filesystem;
using nlohmann::json;

GptConfig resolve_model(const TrainConfig& cfg) {
  GptConfig m = gpt_config(cfg.model);
  if (cfg.n_layer > 0) m.n_layer = cfg.n_layer;
  if (cfg.n_head > 0) m.n_head = cfg.n_head;
  if (cfg.d_model > 0) m.d_model = cfg.d_model;
  if (cfg.max_seq > 0) m.max_seq = cfg.max_seq;
  if (cfg.vocab > 0) m.vocab = cfg.vocab, m.padded_vocab = (cfg.vocab + 127) / 128 * 128;
  validate(m);
  return m;
}

std::string checkpoint_path(const std::string& dir, int64_t step) {
  return (fs::path(dir) / ::fmt::format("step_{:06d}.ckpt", step)).string();
}

std::string resolve_checkpoint(const std::string& p) {
  if (!fs::is_directory(p)) return p;
  const fs::path latest = fs::path(p) / "latest";
  std::ifstream in(latest);
  MXDP_CHECK(in.good(), "--load '", p, "' is a directory without a 'latest' file; pass a .ckpt file");
  std::string name;
  std::getline(in, name);
  MXDP_CHECK(!name.empty(), "'", latest.string(), "' is empty");
  return (fs::path(p) / name).string();
}

namespace {

json model_json(const GptConfig& m) {
  return {{"vocab", m.vocab}, {"padded_vocab", m.padded_vocab}, {"max_seq", m.max_seq},
          {"n_layer", m.n_layer}, {"n_head", m.n_head}, {"d_model", m.d_model}};
}

// A data argument that names a text file is prepared next to it, once.
std::string resolve_data(const std::string& data, Communicator& comm) {
  MXDP_CHECK(!data.empty(), "no training data: pass --data DIR (made by `mxdp prepare`) or a text file");
  if (fs::is_directory(data)) return data;
  MXDP_CHECK(fs::is_regular_file(data), "--data '", data, "' is neither a directory nor a file");
  const fs::path text(data);
  const fs::path dir = text.parent_path() / text.stem();
  on_rank0(comm, [&] {
    const fs::path tb = dir / "train.bin";
    if (fs::exists(tb) && fs::exists(dir / "val.bin") && fs::last_write_time(tb) >= fs::last_write_time(text))
      return;
    std::printf("preparing %s -> %s/\n", text.c_str(), dir.c_str());
    prepare(text.string(), dir.string(), 0.1);
  });
  return dir.string();
}

struct OwnedBatch {
  std::vector<int32_t> in, tgt;
  Batch batch;
  void take(const Batch& b) {
    in.assign(b.inputs, b.inputs + size_t(b.B) * b.T);
    tgt.assign(b.targets, b.targets + size_t(b.B) * b.T);
    batch = {in.data(), tgt.data(), b.B, b.T};
  }
};

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

}  // namespace

int train(const TrainConfig& in, Communicator& comm) {
  TrainConfig cfg = in;
  const int rank = comm.rank(), dp = comm.size();
  const bool lead = rank == 0;
  const GptConfig mc = resolve_model(cfg);
  MXDP_CHECK(cfg.steps >= 0, "--steps must be >= 0, got ", cfg.steps);
  MXDP_CHECK(cfg.batch_size >= 1, "--batch-size must be >= 1, got ", cfg.batch_size);
  MXDP_CHECK(cfg.seq_len >= 1 && cfg.seq_len <= mc.max_seq, "--seq-len must be in [1, ", mc.max_seq,
             "] (the model's max_seq), got ", cfg.seq_len);
  MXDP_CHECK(cfg.eval_every >= 0 && cfg.eval_batches >= 1 && cfg.eval_passes >= 1,
             "--eval-every must be >= 0, --eval-batches and --eval-passes >= 1");
  MXDP_CHECK(cfg.save_every >= 0, "--save-every must be >= 0, got ", cfg.save_every);
  MXDP_CHECK(cfg.save_every == 0 || !cfg.save_dir.empty(), "--save-every needs --save-dir");
  if (cfg.dp.lr_decay_steps < 0) cfg.dp.lr_decay_steps = cfg.steps > cfg.dp.warmup_steps ? cfg.steps : 0;
  cfg.dp.validate(dp);

  if (cfg.threads <= 0) {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int per_node = local ? std::max(1, std::atoi(local)) : 1;
    cfg.threads = std::max(1, int(std::thread::hardware_concurrency()) / per_node);
  }
  omp_set_num_threads(cfg.threads);

  const std::optional<LlmcShardSet> llmc = find_llmc_shards(cfg.data);  // llm.c shards, read as they are
  const std::string data_dir = llmc ? cfg.data : resolve_data(cfg.data, comm);
  TokenDataset train_ds = llmc ? TokenDataset(llmc->train) : TokenDataset((fs::path(data_dir) / "train.bin").string());
  TokenDataset val_ds = llmc ? TokenDataset(llmc->val) : TokenDataset((fs::path(data_dir) / "val.bin").string());
  MXDP_CHECK(int(train_ds.vocab_size()) <= mc.vocab, "the data's vocab (", train_ds.vocab_size(),
             ") is larger than the model's (", mc.vocab, "): pass --vocab ", train_ds.vocab_size());
  DataLoader loader(train_ds, cfg.batch_size, cfg.seq_len, rank, dp, cfg.seed);
  const int max_eval = EvalLoader::max_batches(val_ds.size(), cfg.batch_size, cfg.seq_len, dp);
  MXDP_CHECK(max_eval >= 1, "val.bin (", val_ds.size(), " tokens) is too small for one eval batch of ",
             dp, " x ", cfg.batch_size, " x ", cfg.seq_len + 1, " tokens");
  if (cfg.eval_batches > max_eval) {
    if (lead) std::printf("note: --eval-batches %d lowered to %d, all that val.bin holds\n", cfg.eval_batches, max_eval);
    cfg.eval_batches = max_eval;
  }
  EvalLoader eval_loader(val_ds, cfg.batch_size, cfg.seq_len, rank, dp, cfg.eval_batches);

  const Device device = resolve_device(cfg.device);
  std::unique_ptr<EngineOps> ops = make_engine_ops(device);
  std::unique_ptr<GptModel> model_ptr = make_gpt(device, mc, *ops);
  GptModel& model = *model_ptr;
  model.init_weights(cfg.seed);
  if (!cfg.init_from.empty()) {
    MXDP_CHECK(cfg.load.empty(), "--init-from starts a run from given weights, --load resumes one: pass one of them");
    init_from_hf_gpt2(model, cfg.init_from);
  }
  DataParallel engine(model, comm, cfg.dp, ops.get());

  if (!cfg.load.empty()) {
    const std::string path = resolve_checkpoint(cfg.load);
    json extra = engine.load_checkpoint(path);
    MXDP_CHECK(extra.contains("model") && extra["model"] == model_json(mc), path,
               ": checkpoint was written for model ", extra.value("model", json()).dump(),
               " but this run builds ", model_json(mc).dump());
    MXDP_CHECK(extra.contains("data"), path, ": checkpoint has no data position");
    loader.set_state(extra["data"].get<DataLoaderState>());
    if (lead) std::printf("loaded %s: step %lld\n", path.c_str(), (long long)engine.iteration());
  }

  if (lead) {
    if (device == Device::Cuda)
      std::printf("mxdp train: %d rank%s (%s), one GPU per rank\n", dp, dp > 1 ? "s" : "", backend_name(comm.backend()));
    else
      std::printf("mxdp train: %d rank%s (%s), %d thread%s per rank\n", dp, dp > 1 ? "s" : "",
                  backend_name(comm.backend()), cfg.threads, cfg.threads > 1 ? "s" : "");
    std::printf("  %-22s = %s (n_layer %d, n_head %d, d_model %d, max_seq %d, vocab %d): %lld params\n",
                "model", cfg.model.c_str(), mc.n_layer, mc.n_head, mc.d_model, mc.max_seq, mc.vocab,
                (long long)gpt_num_parameters(mc));
    std::printf("  %-22s = %s (train %zu tokens, val %zu tokens)\n", "data", data_dir.c_str(),
                train_ds.size(), val_ds.size());
    auto line = [](const char* k, const std::string& v) { std::printf("  %-22s = %s\n", k, v.c_str()); };
    line("steps", std::to_string(cfg.steps));
    line("batch_size", ::fmt::format("{} per rank x {} ranks x {} micro-batches = {} sequences/step",
                                     cfg.batch_size, dp, cfg.dp.micro_batches,
                                     cfg.batch_size * dp * cfg.dp.micro_batches));
    line("seq_len", std::to_string(cfg.seq_len));
    line("seed", std::to_string(cfg.seed));
    line("eval_every", ::fmt::format("{} ({} batches, {} pass{}{})", cfg.eval_every, cfg.eval_batches,
                                     cfg.eval_passes, cfg.eval_passes > 1 ? "es" : "",
                                     cfg.eval_first ? ", also before the first step" : ""));
    line("save", cfg.save_dir.empty()  ? "off"
                 : cfg.save_every == 0 ? ::fmt::format("after the last step to {}", cfg.save_dir)
                                       : ::fmt::format("every {} steps and after the last to {}",
                                                       cfg.save_every, cfg.save_dir));
    line("load", cfg.load.empty() ? "-" : cfg.load);
    line("init_from", cfg.init_from.empty() ? "-" : cfg.init_from);
    line("metrics", cfg.metrics.empty() ? "-" : cfg.metrics);
    for (auto& [k, v] : cfg.dp.describe()) line(k.c_str(), v);
    std::fflush(stdout);
  }

  std::FILE* metrics = nullptr;
  if (lead && !cfg.metrics.empty()) {
    metrics = std::fopen(cfg.metrics.c_str(), cfg.load.empty() ? "w" : "a");
    MXDP_CHECK(metrics, "cannot open --metrics '", cfg.metrics, "': ", std::strerror(errno));
  }
  auto emit = [&](const json& j) {
    if (!metrics) return;
    std::fprintf(metrics, "%s\n", j.dump().c_str());
    std::fflush(metrics);
  };
  {
    // First line of a run (and of each resumed part): what produced the lines below.
    json opts = json::object();
    for (auto& [k, v] : cfg.dp.describe()) opts[k] = v;
    emit({{"kind", "config"}, {"step", engine.iteration()}, {"ranks", dp}, {"model", model_json(mc)},
          {"data", data_dir}, {"batch_size", cfg.batch_size}, {"seq_len", cfg.seq_len}, {"seed", cfg.seed},
          {"steps", cfg.steps}, {"options", opts}});
  }
  MXDP_CHECK(cfg.progress == "auto" || cfg.progress == "bar" || cfg.progress == "lines",
             "--progress must be auto, bar or lines, got '", cfg.progress, "'");
  const bool tty = lead && (cfg.progress == "bar" ||
                            (cfg.progress == "auto" && ::isatty(STDOUT_FILENO) &&
                             !std::getenv("OMPI_COMM_WORLD_SIZE")));
  bool progress_open = false;  // a \r progress line is on screen
  auto println = [&](const std::string& s) {
    if (!lead) return;
    if (progress_open) std::printf("\r\033[K");
    progress_open = false;
    std::printf("%s\n", s.c_str());
    std::fflush(stdout);
  };

  std::vector<OwnedBatch> eval_data(cfg.eval_batches);
  double last_eval = NAN;
  auto run_eval = [&](int64_t step) {
    eval_loader.reset();
    std::vector<Batch> batches;
    for (auto& ob : eval_data) {
      Batch b;
      MXDP_CHECK(eval_loader.next(b), "eval loader ran out of batches");
      ob.take(b);
      batches.push_back(ob.batch);
    }
    const auto t0 = std::chrono::steady_clock::now();
    double loss = 0;
    for (int p = 0; p < cfg.eval_passes; ++p) {
      // Each pass is a full eval through the freshness chain, emitted on its own line.
      const double l = engine.eval(batches);
      emit({{"kind", "eval"}, {"step", step}, {"loss", l}, {"pass", p + 1}});
      if (p == 0) loss = l;
      MXDP_CHECK(std::memcmp(&l, &loss, sizeof loss) == 0, "eval pass ", p + 1, " at step ", step,
                 " gave loss ", l, " but pass 1 gave ", loss, ": the weights changed between passes");
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    last_eval = loss;
    println(::fmt::format("eval  step {:>6} | loss {:.4f} | {:.2f}s", step, loss, secs));
  };

  auto save = [&](int64_t step) {
    const std::string path = checkpoint_path(cfg.save_dir, step);
    json extra = {{"data", loader.state()}, {"model", model_json(mc)}, {"seed", cfg.seed},
                  {"weight_format", to_string(cfg.dp.weight_format)},  // what sample/export rebuild the weights with
                  {"mxfp8_scale_rounding", to_string(cfg.dp.mxfp8_scale_rounding)}};
    engine.save_checkpoint(path, extra);
    on_rank0(comm, [&] {
      const std::string name = fs::path(path).filename().string() + "\n";
      write_file_atomic((fs::path(cfg.save_dir) / "latest").string(),
                        std::vector<uint8_t>(name.begin(), name.end()));
    });
    println("saved " + path);
  };

  if (cfg.eval_first) run_eval(engine.iteration());

  const int64_t first = engine.iteration() + 1;
  const double tokens_per_step = double(cfg.batch_size) * cfg.seq_len * dp * cfg.dp.micro_batches;
  std::vector<OwnedBatch> micro(cfg.dp.micro_batches);
  std::vector<Batch> mbs(cfg.dp.micro_batches);
  double last_loss = NAN, ema_rate = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = first; step <= cfg.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int m = 0; m < cfg.dp.micro_batches; ++m) {
      Batch b;
      loader.next(b);
      micro[m].take(b);
      mbs[m] = micro[m].batch;
    }
    StepResult r = engine.train_step(mbs);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double rate = tokens_per_step / dt;
    ema_rate = step == first ? rate : 0.9 * ema_rate + 0.1 * rate;
    last_loss = r.loss;
    emit({{"kind", "train"}, {"step", step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
          {"tokens_per_s", rate}, {"skipped", r.skipped}});
    if (r.skipped)
      println(::fmt::format("step {}: non-finite gradients (norm {}), update skipped; {} skipped so far",
                            step, r.grad_norm, engine.skipped_steps()));
    const double eta = double(cfg.steps - step) * tokens_per_step / std::max(ema_rate, 1e-9);
    const std::string prog = ::fmt::format(
        "step {:>6}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {} tok/s | ETA {}", step,
        cfg.steps, r.loss, r.lr, r.grad_norm, human_rate(ema_rate), human_time(eta));
    if (tty) {
      std::printf("\r\033[K%s", prog.c_str());
      std::fflush(stdout);
      progress_open = true;
    } else if (lead && (step % cfg.log_every == 0 || step == first || step == cfg.steps)) {
      println(prog);
    }
    const bool last = step == cfg.steps;
    if ((cfg.eval_every > 0 && step % cfg.eval_every == 0) || (last && cfg.eval_every > 0)) run_eval(step);
    if (!cfg.save_dir.empty() && ((cfg.save_every > 0 && step % cfg.save_every == 0) || last)) save(step);
  }
  if (progress_open) println("");
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (lead && cfg.steps >= first)
    std::printf("done: %lld steps in %s, final train loss %.4f%s\n", (long long)(cfg.steps - first + 1),
                human_time(total).c_str(), last_loss,
                std::isnan(last_eval) ? "" : ::fmt::format(", final eval loss {:.4f}", last_eval).c_str());
  if (cfg.sample_tokens > 0) {
    engine.sync_weights();  // collective: the model now holds the latest weights
    if (lead) {
      SampleOptions so;
      so.tokens = cfg.sample_tokens;
      so.seed = cfg.seed;
      print_run_sample(model, *data_tokenizer(llmc ? fs::path(llmc->train[0]).parent_path().string() : data_dir),
                       train_ds.vocab_size(), cfg.sample_prompt, so);
    }
  }
  if (metrics) std::fclose(metrics);
  comm.barrier();
  return 0;
}

}  // namespace mxdp
