// mxdp plan: memory per rank and bytes moved per step for a model and dp size,
// in every gather mode, from the layout alone (nothing is allocated).
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "engine/engine.h"
#include "engine/layout.h"
#include "formats/format.h"
#include "models/model.h"
#include "train/trainer.h"
#include "util/check.h"

namespace mxdp::cli {

namespace {
std::string bytes(int64_t b) {
  if (b >= (int64_t(1) << 30)) return ::fmt::format("{:.2f} GiB", double(b) / (1 << 30));
  if (b >= (int64_t(1) << 20)) return ::fmt::format("{:.1f} MiB", double(b) / (1 << 20));
  return ::fmt::format("{:.1f} KiB", double(b) / 1024);
}

struct Mode {
  std::string name;
  bool dist;
  WeightFormat f;
  bool reuse;
  LinearCompute compute = LinearCompute::Bf16;
};

// The reference mode, then each format's distributed gather (and, for a
// format whose payload fits the idle grad buffer, the same with it there;
// with FP8 compute, fp8b128's with it).
std::vector<Mode> plan_modes(bool fp8_compute) {
  std::vector<Mode> modes = {{"reference: replicated (gathers grads)", false, WeightFormat::Bf16, false}};
  for (const FormatTraits& t : all_formats()) {
    modes.push_back({::fmt::format("distributed, {} gather", t.name), true, t.id, false});
    if (t.fits_grad_buffer) modes.push_back({::fmt::format("distributed, {} + grad-buf reuse", t.name), true, t.id, true});
    if (fp8_compute && t.id == WeightFormat::Fp8b128)
      modes.push_back({::fmt::format("distributed, {} + fp8 compute", t.name), true, t.id, false, LinearCompute::Fp8});
  }
  return modes;
}

// One line of the table: the mode, its memory columns (the total last), its traffic.
void print_row(const std::string& mode, const std::vector<std::string>& memory, const std::string& gather,
               const std::string& ratio, const std::string& reduce) {
  std::string line = ::fmt::format("{:<38}", mode);
  for (const std::string& m : memory) line += ::fmt::format(" {:>11}", m);
  line += ::fmt::format(" | {:>12} {:>8} {:>14}", gather, ratio, reduce);
  std::puts(line.c_str());
}
}  // namespace

void add_plan_command(CLI::App& app, Runner& run) {
  struct Opts {
    TrainConfig c;
    int dp = 8;
    int64_t bucket = DpOptions{}.bucket_size;  // what mxdp train uses (0: auto)
    std::string grad_dtype = "fp32";
    std::string compute_dtype = "bf16";
    int bf16_first = 0, bf16_last = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("plan", "Memory per rank and traffic per step of each gather mode (nothing runs)");
  cmd->option_defaults()->always_capture_default();
  cmd->add_option("--model", o->c.model, "Named config (see mxdp train --help; the same default as train)");
  cmd->add_option("--n-layer", o->c.n_layer, "Override the number of blocks (0 = keep)");
  cmd->add_option("--d-model", o->c.d_model, "Override the width (0 = keep)");
  cmd->add_option("--n-head", o->c.n_head, "Override the heads (0 = keep)");
  cmd->add_option("--dp", o->dp, "Data-parallel ranks")->check(CLI::Range(1, 1 << 20));
  add_bucket_size_option(cmd, o->bucket);
  cmd->add_option("--grad-reduce-dtype", o->grad_dtype, "Reduce-scatter dtype")->check(CLI::IsMember({"fp32", "bf16"}));
  add_compute_dtype_option(cmd, o->compute_dtype, "adds the row of the fp8b128 gather with FP8 compute");
  cmd->add_option("--num-layers-at-start-in-bf16", o->bf16_first, "With --compute-dtype fp8: the first N blocks in bf16")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--num-layers-at-end-in-bf16", o->bf16_last, "With --compute-dtype fp8: the last N blocks in bf16")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([o, &run] {
    run = [o] {
      const ModelConfig mc = resolve_model(o->c);
      DpOptions given;  // what train refuses, plan refuses
      given.bucket_size = o->bucket;
      const int64_t bucket = given.bucket_elems(o->dp);  // auto: train's size at this dp
      given.compute_dtype = parse_compute_dtype(o->compute_dtype);
      given.weight_format = given.compute_dtype == LinearCompute::Fp8 ? WeightFormat::Fp8b128 : given.weight_format;
      given.num_layers_at_start_in_bf16 = o->bf16_first;
      given.num_layers_at_end_in_bf16 = o->bf16_last;
      const bool fp8 = given.compute_dtype == LinearCompute::Fp8;
      // Under FP8 compute, the blocks kept in bf16 have no W and W^T.
      const auto params = compute_param_specs(mc, given, o->c.model);
      int fp8_weights = 0;
      for (const ParamSpec& p : params) fp8_weights += fp8 && p.fp8_linear;
      std::printf("mxdp plan: %s, %lld params, dp %d, buckets of %lld elements, %s reduce-scatter%s\n",
                  o->c.model.c_str(), (long long)mc.spec().num_parameters(mc), o->dp, (long long)bucket,
                  o->grad_dtype.c_str(), fp8 ? ", fp8 compute in the fp8b128 mode" : "");
      std::vector<std::string> head = {"masters", "adam m+v", "grads", "payload"};
      if (fp8) head.push_back("fp8 W+W^T");
      head.push_back("total");
      print_row("mode (per rank)", head, "gather/step", "vs bf16", "reduce/step");
      MemoryPlan bf16{};
      int64_t fp8_weight_bytes = 0;
      for (const Mode& m : plan_modes(fp8)) {
        DpOptions d;
        d.distributed_optimizer = m.dist;
        d.overlap_param_gather = m.dist;
        d.weight_format = m.f;
        d.reuse_grad_buf = m.reuse;
        d.compute_dtype = m.compute;
        d.bucket_size = bucket;
        d.grad_reduce_dtype = parse_grad_reduce_dtype(o->grad_dtype);
        d.validate(o->dp);
        const MemoryPlan p = plan_memory(params, Layout::build(params, m.f, bucket, o->dp), d);
        if (m.dist && !format_traits(m.f).low_precision()) bf16 = p;
        const std::string ratio =
            m.dist && bf16.gather_bytes ? ::fmt::format("{:.3f}x", double(p.gather_bytes) / bf16.gather_bytes) : "-";
        std::vector<std::string> memory = {bytes(p.master_bytes), bytes(p.adam_bytes),
                                           bytes(p.main_grad_bytes + p.grad_bytes + p.grad_reduce_bytes),
                                           bytes(p.payload_bytes)};
        if (fp8) memory.push_back(m.compute == LinearCompute::Fp8 ? bytes(p.fp8_weight_bytes) : "-");
        memory.push_back(bytes(p.total_bytes()));
        print_row(m.name, memory, bytes(p.gather_bytes), ratio, bytes(p.reduce_bytes));
        if (m.compute == LinearCompute::Fp8) fp8_weight_bytes = p.fp8_weight_bytes;
      }
      std::printf("gather/step: bytes all-gathered per optimizer step, each rank sending 1/dp of them: the\n"
                  "parameter payload, or in the reference mode the reduced fp32 gradients.\n");
      if (fp8)
        std::printf("fp8 W+W^T: every rank's W and W^T (E4M3 codes, fp32 tile scales in the GEMM layout)\n"
                    "of the %d linear weights that compute in FP8: %lld bytes; the model keeps no bf16\n"
                    "copy of them (the model's own weights are in no column).\n",
                    fp8_weights, (long long)fp8_weight_bytes);
      return 0;
    };
  });
}

}  // namespace mxdp::cli
