#include "train/schedule.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <fmt/format.h>

#include "util/check.h"

namespace mxdp {

using nlohmann::json;

json Schedule::to_json() const {
  json j = {{"source", source}, {"lr", lr}, {"min_lr", min_lr}, {"warmup_steps", warmup_steps},
            {"lr_decay_steps", lr_decay_steps}};
  if (lr_default_for_d_model > 0) j["lr_default_for_d_model"] = lr_default_for_d_model;
  return j;
}

std::string Schedule::describe(int64_t first, int64_t last) const {
  std::string d = warmup_steps > 0 ? ::fmt::format("linear warmup over {} steps to lr {}", warmup_steps, lr)
                                   : ::fmt::format("lr {}", lr);
  if (lr_decay_steps < 0)
    d += ::fmt::format(", cosine to {} at the last step of a run that passes the warmup (this run ends inside it)",
                       min_lr);
  else
    d += lr_decay_steps > 0 ? ::fmt::format(", cosine to {} at step {}", min_lr, lr_decay_steps)
                            : std::string(", constant after the warmup");
  if (lr_decay_steps > 0 && last > lr_decay_steps && first <= last)
    d += ::fmt::format(" (steps {}-{} are past its end and run at min_lr {})", std::max(first, lr_decay_steps + 1),
                       last, min_lr);
  return d;
}

int64_t Schedule::decay_end(int64_t steps) const {
  if (lr_decay_steps >= 0) return lr_decay_steps;
  return steps > warmup_steps ? steps : 0;  // within the warmup the decay end changes nothing
}

double default_peak_lr(int d_model) {
  MXDP_CHECK(d_model >= 1, "default_peak_lr: d_model must be >= 1, got ", d_model);
  if (d_model <= 256) return 3e-3;
  struct Row {
    int d_model;
    double lr;
  };
  static constexpr Row gpt3[] = {{768, 6e-4},  {1024, 3e-4}, {1536, 2.5e-4}, {2048, 2e-4},
                                 {2560, 1.6e-4}, {4096, 1.2e-4}, {5140, 1e-4},   {12288, 6e-5}};
  for (const Row& r : gpt3)
    if (d_model <= r.d_model) return r.lr;
  return gpt3[std::size(gpt3) - 1].lr;
}

double default_min_lr(double peak_lr) {
  return std::strtod(::fmt::format("{:.15g}", peak_lr / 10).c_str(), nullptr);
}

Schedule schedule_from(const json& s, const std::string& what) {
  auto num = [&](const char* k) {
    MXDP_CHECK(s.is_object() && s.contains(k) && s[k].is_number(), what, ": the checkpoint's schedule has no number \"",
               k, "\"");
    return s[k].get<double>();
  };
  auto integer = [&](const char* k) {
    MXDP_CHECK(s.is_object() && s.contains(k) && s[k].is_number_integer() && s[k].get<int64_t>() >= 0, what,
               ": the checkpoint's schedule has no integer \"", k, "\" >= 0");
    return s[k].get<int64_t>();
  };
  Schedule r;
  r.lr = num("lr");
  r.min_lr = num("min_lr");
  r.warmup_steps = integer("warmup_steps");
  MXDP_CHECK(s.is_object() && s.contains("lr_decay_steps") && s["lr_decay_steps"].is_number_integer() &&
                 s["lr_decay_steps"].get<int64_t>() >= -1,
             what, ": the checkpoint's schedule has no integer \"lr_decay_steps\" >= -1");
  r.lr_decay_steps = s["lr_decay_steps"].get<int64_t>();
  if (s.contains("lr_default_for_d_model")) {  // absent in checkpoints whose lr was given, or older ones
    MXDP_CHECK(s["lr_default_for_d_model"].is_number_integer() && s["lr_default_for_d_model"].get<int64_t>() > 0 &&
                   s["lr_default_for_d_model"].get<int64_t>() <= INT32_MAX,
               what, ": the checkpoint's schedule has a \"lr_default_for_d_model\" that is not a positive integer");
    r.lr_default_for_d_model = int(s["lr_default_for_d_model"].get<int64_t>());
  }
  r.source = "checkpoint";
  return r;
}

}  // namespace mxdp
