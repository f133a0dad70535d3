// mxdp plan: memory per rank and bytes moved per step for a model and dp size,
// in every gather mode, from the layout alone (nothing is allocated).
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "engine/engine.h"
#include "formats/format.h"
#include "train/trainer.h"

namespace mxdp::cli {

namespace {
std::string bytes(int64_t b) {
  if (b >= (int64_t(1) << 30)) return ::fmt::format("{:.2f} GiB", double(b) / (1 << 30));
  if (b >= (int64_t(1) << 20)) return ::fmt::format("{:.1f} MiB", double(b) / (1 << 20));
  return ::fmt::format("{:.1f} KiB", double(b) / 1024);
}
}  // namespace

void add_plan_command(CLI::App& app, Runner& run) {
  struct Opts {
    TrainConfig c;
    int dp = 8;
    int64_t bucket = DpOptions{}.bucket_size;  // what mxdp train uses
    std::string grad_dtype = "fp32";
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("plan", "Memory per rank and traffic per step of each gather mode (nothing runs)");
  cmd->option_defaults()->always_capture_default();
  cmd->add_option("--model", o->c.model, "Named config (see mxdp train --help; the same default as train)");
  cmd->add_option("--n-layer", o->c.n_layer, "Override the number of blocks (0 = keep)");
  cmd->add_option("--d-model", o->c.d_model, "Override the width (0 = keep)");
  cmd->add_option("--n-head", o->c.n_head, "Override the heads (0 = keep)");
  cmd->add_option("--dp", o->dp, "Data-parallel ranks")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--bucket-size", o->bucket, "Elements per bucket")->check(CLI::PositiveNumber);
  cmd->add_option("--grad-reduce-dtype", o->grad_dtype, "Reduce-scatter dtype")->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->callback([o, &run] {
    run = [o] {
      const ModelConfig mc = resolve_model(o->c);
      const auto params = mc.spec().param_specs(mc);
      struct Mode {
        std::string name;
        bool dist;
        WeightFormat f;
        bool reuse;
      };
      // The reference mode, then each format's distributed gather (and, for a
      // format whose payload fits the idle grad buffer, the same with it there).
      std::vector<Mode> modes = {{"reference: replicated (gathers grads)", false, WeightFormat::Bf16, false}};
      for (const FormatTraits& t : all_formats()) {
        modes.push_back({::fmt::format("distributed, {} gather", t.name), true, t.id, false});
        if (t.fits_grad_buffer) modes.push_back({::fmt::format("distributed, {} + grad-buf reuse", t.name), true, t.id, true});
      }
      std::printf("mxdp plan: %s, %lld params, dp %d, buckets of %lld elements, %s reduce-scatter\n",
                  o->c.model.c_str(), (long long)mc.spec().num_parameters(mc), o->dp, (long long)o->bucket,
                  o->grad_dtype.c_str());
      std::printf("%-38s %11s %11s %11s %11s %11s | %12s %8s %14s\n", "mode (per rank)", "masters", "adam m+v",
                  "grads", "payload", "total", "gather/step", "vs bf16", "reduce/step");
      MemoryPlan bf16{};
      for (const Mode& m : modes) {
        DpOptions d;
        d.distributed_optimizer = m.dist;
        d.overlap_param_gather = m.dist;
        d.weight_format = m.f;
        d.reuse_grad_buf = m.reuse;
        d.bucket_size = o->bucket;
        d.grad_reduce_dtype = parse_grad_reduce_dtype(o->grad_dtype);
        d.validate(o->dp);
        const MemoryPlan p = plan_memory(params, Layout::build(params, m.f, o->bucket, o->dp), d);
        if (m.dist && !format_traits(m.f).low_precision()) bf16 = p;
        const std::string ratio =
            m.dist && bf16.gather_bytes ? ::fmt::format("{:.3f}x", double(p.gather_bytes) / bf16.gather_bytes) : "-";
        std::printf("%-38s %11s %11s %11s %11s %11s | %12s %8s %14s\n", m.name.c_str(), bytes(p.master_bytes).c_str(),
                    bytes(p.adam_bytes).c_str(), bytes(p.main_grad_bytes + p.grad_bytes + p.grad_reduce_bytes).c_str(),
                    bytes(p.payload_bytes).c_str(), bytes(p.total_bytes()).c_str(),
                    bytes(p.gather_bytes).c_str(), ratio.c_str(), bytes(p.reduce_bytes).c_str());
      }
      std::printf("gather/step: bytes all-gathered per optimizer step, each rank sending 1/dp of them: the\n"
                  "parameter payload, or in the reference mode the reduced fp32 gradients.\n");
      return 0;
    };
  });
}

}  // namespace mxdp::cli
