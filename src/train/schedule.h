// The learning-rate schedule of a run, and where it came from (the command
// line, a checkpoint, or the command line over a checkpoint's), as the
// trainer records it in checkpoints and metrics.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace mxdp {

struct Schedule {
  double lr = 0, min_lr = 0;
  // decay 0: constant after warmup. -1: the cosine ends at the run's --steps
  // (the default, `--lr-decay-steps -1`), not fixed yet because every step so
  // far was in the warmup; a resumed run fixes it from its own --steps.
  int64_t warmup_steps = 0, lr_decay_steps = 0;
  std::string source;                            // "command line", "checkpoint" or "override"
  // > 0: the peak lr is default_peak_lr of this width (no --lr was given);
  // recorded as "lr_default_for_d_model" only then.
  int lr_default_for_d_model = 0;

  nlohmann::json to_json() const;
  // In words, for the run header (steps first..last of this run).
  std::string describe(int64_t first, int64_t last) const;
  // The decay end the engine runs with for a run to `steps` (-1 resolved).
  int64_t decay_end(int64_t steps) const;
};

// The peak learning rate `mxdp train` uses when --lr is not given, by the
// model's width: 3e-3 up to d_model 256 (the tiny models' rate), above that
// the rate GPT-3 trained its narrowest model at least as wide with (Brown et
// al. 2020, table 2.1: 6e-4 at d_model 768, 3e-4 at 1024, 2.5e-4 at 1536,
// 2e-4 at 2048, 1.6e-4 at 2560, 1.2e-4 at 4096, 1e-4 at 5140, 6e-5 at 12288
// and beyond). docs/gpt.md, "The default learning rate", has the measurements.
double default_peak_lr(int d_model);
// The floor of the cosine when --min-lr is not given: a tenth of the peak as
// written in decimal (15 digits), so that 3e-3 gives the double 3e-4 is, not
// 3e-3 / 10, which is another double (0.00030000000000000003).
double default_min_lr(double peak_lr);

// A schedule recorded in a checkpoint's extra, checked (`what` names the checkpoint).
Schedule schedule_from(const nlohmann::json& s, const std::string& what);

}  // namespace mxdp
