// DpOptions: every knob of the data-parallel core, declared once with its
// default and meaning, validated at start (validate()), printed in the run
// header (describe()). Names follow Megatron-Core's so its users know them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "formats/format.h"
#include "formats/quant.h"
#include "models/model.h"

namespace mxdp {

enum class GradReduceDType : uint8_t { Fp32, Bf16 };
// What the linear layers of a model that supports it compute with: the
// dequantized weights (bf16: the model's compute weights, bf16 or fp32), or
// FP8 (the engine's fp8b128 codes and tile scales, read through
// ModelHooks::fp8_weight: docs/fp8.md).
enum class LinearCompute : uint8_t { Bf16, Fp8 };

const char* to_string(GradReduceDType t);
const char* to_string(LinearCompute c);
LinearCompute parse_compute_dtype(const std::string& s);
const char* to_string(ScaleRounding r);
ScaleRounding parse_scale_rounding(const std::string& s);
GradReduceDType parse_grad_reduce_dtype(const std::string& s);

struct DpOptions {
  // -- sharding and gather
  bool distributed_optimizer = true;   // shard fp32 masters + AdamW state (ZeRO-1); off = reference mode
  WeightFormat weight_format = WeightFormat::Mxfp8;  // gather format of 2-D weights (row length % 32 == 0)
  ScaleRounding mxfp8_scale_rounding = ScaleRounding::RCeil;  // E8M0 scale: rceil (TE) or floor (OCP MX)
  bool overlap_grad_reduce = true;     // start each bucket's reduce-scatter as soon as its grads are in
  bool overlap_param_gather = true;    // defer each bucket's all-gather to just before its first layer
  bool reuse_grad_buf = false;         // MXFP8 gather payload lives in the idle grad buffer
  // Elements per bucket (a bucket closes once it reaches this); 0 = auto,
  // Megatron-Core's default: default_bucket_size(dp). bucket_elems(dp) says which.
  int64_t bucket_size = 0;
  GradReduceDType grad_reduce_dtype = GradReduceDType::Fp32;  // dtype of the reduce-scatter
  LinearCompute compute_dtype = LinearCompute::Bf16;  // fp8: FP8 GEMMs on the fp8b128 payload (needs weight_format fp8b128)
  // compute_dtype fp8: how many blocks at the start and at the end of the
  // model keep bf16 compute (Megatron-LM's --num-layers-at-start-in-bf16 /
  // --num-layers-at-end-in-bf16; the model decides which params that makes:
  // models/model.h's Fp8Compute). Their weights still travel in fp8b128.
  int num_layers_at_start_in_bf16 = 0;
  int num_layers_at_end_in_bf16 = 0;
  // -- optimizer
  double clip_grad = 1.0;              // global grad-norm clip; 0 disables
  double lr = 1e-3;                    // peak learning rate
  double min_lr = 1e-4;                // floor of the cosine decay
  int64_t warmup_steps = 0;            // linear warmup from 0 to lr
  int64_t lr_decay_steps = 0;          // cosine from warmup_steps to here; 0 = constant after warmup
  double weight_decay = 0.1;           // decoupled (AdamW); never applied to 1-D params
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.95;
  double adam_eps = 1e-8;
  int micro_batches = 1;               // gradient accumulation steps per optimizer step
  // -- test only (fault switches are not options: faults.h, test builds only)
  std::vector<int> layout_order;       // test only: param order in the buffers (default: backward order)

  // Throws mxdp::Error naming the first invalid option and why.
  void validate(int dp) const;
  // The part of validate() about FP8 compute (a trainer checks it before any data is prepared).
  void validate_fp8_compute() const;
  // "name = value" lines for the run header.
  std::vector<std::pair<std::string, std::string>> describe() const;
  // The reference run of these options: replicated optimizer, no param gather.
  DpOptions reference() const;
  // Megatron-Core's bucket size: max(40M, 1M x dp) elements (more ranks need
  // larger buckets to keep each collective from being bound by its latency).
  static int64_t default_bucket_size(int dp) { return std::max<int64_t>(40'000'000, 1'000'000 * int64_t(dp)); }
  int64_t bucket_elems(int dp) const { return bucket_size > 0 ? bucket_size : default_bucket_size(dp); }
  // Whether the gather payload of a buffer in format f lives in its grad buffer.
  bool payload_in_grad_buffer(WeightFormat f) const { return reuse_grad_buf && format_traits(f).fits_grad_buffer; }
  // What the model computes in FP8 (Model::set_fp8_compute).
  Fp8Compute model_fp8_compute() const {
    return {compute_dtype == LinearCompute::Fp8, num_layers_at_start_in_bf16, num_layers_at_end_in_bf16};
  }
  // Whether a param with fp8_linear traveling in format f feeds FP8 compute
  // (the model reads its codes, not dequantized compute weights).
  bool fp8_compute(WeightFormat f, bool fp8_linear) const {
    return compute_dtype == LinearCompute::Fp8 && f == WeightFormat::Fp8b128 && fp8_linear;
  }
};

}  // namespace mxdp
