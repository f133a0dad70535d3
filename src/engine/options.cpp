#include "engine/options.h"

#include <cmath>
#include <fmt/format.h>

#include "util/check.h"

namespace mxdp {

const char* to_string(GradReduceDType t) { return t == GradReduceDType::Fp32 ? "fp32" : "bf16"; }
const char* to_string(LinearCompute c) { return c == LinearCompute::Bf16 ? "bf16" : "fp8"; }
LinearCompute parse_compute_dtype(const std::string& s) {
  if (s == "bf16") return LinearCompute::Bf16;
  if (s == "fp8") return LinearCompute::Fp8;
  MXDP_FAIL("compute_dtype must be bf16 or fp8; got '", s, "'");
}
const char* to_string(ScaleRounding r) { return r == ScaleRounding::RCeil ? "rceil" : "floor"; }

ScaleRounding parse_scale_rounding(const std::string& s) {
  if (s == "rceil") return ScaleRounding::RCeil;
  if (s == "floor") return ScaleRounding::Floor;
  MXDP_FAIL("mxfp8_scale_rounding must be rceil or floor; got '", s, "'");
}
GradReduceDType parse_grad_reduce_dtype(const std::string& s) {
  if (s == "fp32") return GradReduceDType::Fp32;
  if (s == "bf16") return GradReduceDType::Bf16;
  MXDP_FAIL("grad_reduce_dtype must be fp32 or bf16; got '", s, "'");
}

void DpOptions::validate(int dp) const {
  MXDP_CHECK(dp >= 1, "data-parallel size must be >= 1, got ", dp);
  if (!distributed_optimizer) {
    MXDP_CHECK(!overlap_param_gather,
               "overlap_param_gather needs distributed_optimizer: without it there is no param "
               "all-gather to overlap (every rank holds the full fp32 weights)");
    MXDP_CHECK(!reuse_grad_buf,
               "reuse_grad_buf needs distributed_optimizer: without it no gathered payload exists "
               "to place in the grad buffer");
  }
  MXDP_CHECK(!reuse_grad_buf || format_traits(weight_format).fits_grad_buffer,
             "reuse_grad_buf holds the MXFP8 gather payload in the grad buffer; it needs "
             "weight_format mxfp8, got ", to_string(weight_format));
  validate_fp8_compute();
  MXDP_CHECK(bucket_size >= 0, "bucket_size must be >= 1 element (or 0: auto), got ", bucket_size);
  MXDP_CHECK(micro_batches >= 1, "micro_batches must be >= 1, got ", micro_batches);
  MXDP_CHECK(std::isfinite(lr) && lr >= 0, "lr must be finite and >= 0, got ", lr);
  MXDP_CHECK(std::isfinite(min_lr) && min_lr >= 0 && min_lr <= lr,
             "min_lr must be in [0, lr], got ", min_lr, " with lr ", lr);
  MXDP_CHECK(warmup_steps >= 0, "warmup_steps must be >= 0, got ", warmup_steps);
  MXDP_CHECK(lr_decay_steps == 0 || lr_decay_steps > warmup_steps,
             "lr_decay_steps must be 0 (no decay) or > warmup_steps (", warmup_steps, "), got ",
             lr_decay_steps);
  MXDP_CHECK(std::isfinite(clip_grad) && clip_grad >= 0, "clip_grad must be >= 0 (0 = off), got ",
             clip_grad);
  MXDP_CHECK(weight_decay >= 0, "weight_decay must be >= 0, got ", weight_decay);
  MXDP_CHECK(adam_beta1 >= 0 && adam_beta1 < 1, "adam_beta1 must be in [0, 1), got ", adam_beta1);
  MXDP_CHECK(adam_beta2 >= 0 && adam_beta2 < 1, "adam_beta2 must be in [0, 1), got ", adam_beta2);
  MXDP_CHECK(adam_eps > 0, "adam_eps must be > 0, got ", adam_eps);
}

void DpOptions::validate_fp8_compute() const {
  MXDP_CHECK(compute_dtype != LinearCompute::Fp8 || weight_format == WeightFormat::Fp8b128,
             "compute_dtype fp8 (--compute-dtype fp8) computes with the fp8b128 weight tiles; it needs "
             "weight_format fp8b128 (--weight-format fp8b128), got ", to_string(weight_format));
  MXDP_CHECK(num_layers_at_start_in_bf16 >= 0 && num_layers_at_end_in_bf16 >= 0,
             "num_layers_at_start_in_bf16 and num_layers_at_end_in_bf16 must be >= 0, got ",
             num_layers_at_start_in_bf16, " and ", num_layers_at_end_in_bf16);
  MXDP_CHECK(compute_dtype == LinearCompute::Fp8 || (num_layers_at_start_in_bf16 == 0 && num_layers_at_end_in_bf16 == 0),
             "num_layers_at_start_in_bf16 / num_layers_at_end_in_bf16 (--num-layers-at-start-in-bf16 / "
             "--num-layers-at-end-in-bf16) keep blocks out of FP8 compute; they need compute_dtype fp8 "
             "(--compute-dtype fp8)");
}

std::vector<std::pair<std::string, std::string>> DpOptions::describe() const {
  auto b = [](bool x) { return std::string(x ? "on" : "off"); };
  std::vector<std::pair<std::string, std::string>> d = {
      {"distributed_optimizer", b(distributed_optimizer)},
      {"weight_format", to_string(weight_format)},
      {"mxfp8_scale_rounding", to_string(mxfp8_scale_rounding)},
      {"overlap_grad_reduce", b(overlap_grad_reduce)},
      {"overlap_param_gather", b(overlap_param_gather)},
      {"reuse_grad_buf", b(reuse_grad_buf)},
      {"bucket_size", bucket_size > 0 ? std::to_string(bucket_size) : "auto"},
      {"grad_reduce_dtype", to_string(grad_reduce_dtype)},
      {"compute_dtype", to_string(compute_dtype)},
  };
  if (compute_dtype == LinearCompute::Fp8) {
    d.emplace_back("num_layers_at_start_in_bf16", std::to_string(num_layers_at_start_in_bf16));
    d.emplace_back("num_layers_at_end_in_bf16", std::to_string(num_layers_at_end_in_bf16));
  }
  d.insert(d.end(), {
      {"clip_grad", ::fmt::format("{}", clip_grad)},
      {"lr", ::fmt::format("{}", lr)},
      {"min_lr", ::fmt::format("{}", min_lr)},
      {"warmup_steps", std::to_string(warmup_steps)},
      {"lr_decay_steps", std::to_string(lr_decay_steps)},
      {"weight_decay", ::fmt::format("{}", weight_decay)},
      {"adam_beta1", ::fmt::format("{}", adam_beta1)},
      {"adam_beta2", ::fmt::format("{}", adam_beta2)},
      {"adam_eps", ::fmt::format("{}", adam_eps)},
      {"micro_batches", std::to_string(micro_batches)},
  });
  return d;
}

DpOptions DpOptions::reference() const {
  DpOptions r = *this;
  r.distributed_optimizer = false;
  r.overlap_param_gather = false;
  r.reuse_grad_buf = false;
  return r;
}

}  // namespace mxdp
