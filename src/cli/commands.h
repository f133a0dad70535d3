// The `mxdp` command line: one subcommand per file in src/cli/. Each add_*
// function declares its subcommand and options on `app` and, when that
// subcommand is chosen, stores the code to run into `run`.
#pragma once

#include <CLI/CLI.hpp>
#include <exception>
#include <functional>
#include <string>

namespace mxdp::cli {

using Runner = std::function<int()>;

void add_quantize_commands(CLI::App& app, Runner& run);  // quantize, dequantize (cmd_quantize.cpp)
void add_prepare_command(CLI::App& app, Runner& run);    // prepare (cmd_prepare.cpp)
void add_train_command(CLI::App& app, Runner& run);      // train (cmd_train.cpp)
void add_sample_command(CLI::App& app, Runner& run);     // sample (cmd_sample.cpp)
void add_plot_command(CLI::App& app, Runner& run);       // plot (cmd_plot.cpp)
void add_plan_command(CLI::App& app, Runner& run);       // plan (cmd_plan.cpp)
void add_export_command(CLI::App& app, Runner& run);     // export (cmd_export.cpp)

// --compute-dtype (bf16 or fp8) into `into`, as train and plan both take it;
// `fp8_note` says what fp8 means to this command.
inline CLI::Option* add_compute_dtype_option(CLI::App* cmd, std::string& into, const std::string& fp8_note) {
  return cmd
      ->add_option("--compute-dtype", into,
                   "Linear layers compute with the dequantized weights (bf16) or FP8 GEMMs on the fp8b128 tiles (fp8: "
                   "GPT-2 and Llama, on the CPU and the GPU; " + fp8_note + ")")
      ->check(CLI::IsMember({"bf16", "fp8"}));
}

// --bucket-size, as train and plan both take it: a positive element count, or
// auto (stored as 0: DpOptions::default_bucket_size at the run's dp).
inline CLI::Option* add_bucket_size_option(CLI::App* cmd, int64_t& into) {
  const CLI::Validator count_or_auto(
      [](std::string& v) -> std::string {
        if (v == "auto") {
          v = "0";
          return "";
        }
        size_t used = 0;
        long long n = 0;
        try {
          n = std::stoll(v, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == v.size() && n > 0) return "";
        return "a positive number of elements or auto, got '" + v + "'";
      },
      "ELEMENTS|auto");
  return cmd
      ->add_option("--bucket-size", into, "Elements per bucket (auto: Megatron-Core's max(40000000, 1000000 x dp))")
      ->transform(count_or_auto)
      ->default_str("auto");
}

}  // namespace mxdp::cli
