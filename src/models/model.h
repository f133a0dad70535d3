// Model: what the data-parallel engine needs from a network.
//
// A model owns its compute weights (fp32 on the CPU) and its activations. The
// engine owns everything else: fp32 master weights, optimizer state, gradient
// buffers and the quantized parameter buffers. The two meet through:
//
//   params()        the parameters, in forward order, each with the layer that
//                   first reads it; the engine lays buffers out from this list.
//   weights(i)      where param i's compute weights live; the engine writes them
//                   (unpack = dequantize the gathered buffer into them).
//   ModelHooks      called by the model while it runs:
//     before_layer(L)        before layer L reads any parameter. The engine makes
//                            every param with layer <= L fresh here (and checks it).
//     grad(i)                the fp32 slice where param i's gradient ACCUMULATES (+=).
//     after_layer_backward(L) all gradient contributions to every param whose
//                            `layer` is L are in; the engine may reduce them now.
//     fp8_weight(i), fp8_weight_transposed(i)
//                            FP8 compute only (DpOptions::compute_dtype fp8):
//                            param i's fp8b128 codes and GEMM-layout tile
//                            scales, W for fprop (after before_layer) and W^T
//                            for dgrad (in backward), engine-owned and checked
//                            fresh on every call (docs/fp8.md). The model then
//                            has no compute weights of its own for that param
//                            (the params with ParamSpec::fp8_linear).
//
// Compute dtype: the CPU models compute in fp32 and expose weights(i) as
// float*; GPU models keep bf16 compute weights (compute_weights(i), written by
// the engine's unpack in that dtype) and hand the engine their fp32 initial
// values through initial_weights(i), which the engine copies into its masters
// once, at construction.
//
// Layers are numbered 0 .. num_layers()-1 in forward order; forward calls
// before_layer for each of them in increasing order, backward calls
// after_layer_backward for each in decreasing order. A param read by several
// layers (a tied embedding) names the first; its gradient is complete only when
// after_layer_backward of that first layer is called.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/check.h"

namespace mxdp {

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;  // row-major; 2-D weights are {rows, cols}
  int layer = 0;               // first forward layer that reads it
  bool decay = true;           // decoupled weight decay applies (false for 1-D params)
  bool fp8_linear = false;     // a linear layer's weight the model reads as FP8 W / W^T under compute_dtype fp8
                               // (when it travels in fp8b128); other params keep dequantized compute weights
  bool embedding = false;      // a token or position embedding table (a tied LM head included): some formats
                               // do not take one (FormatTraits::takes_embeddings, engine/layout.h)

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// FP8 compute (compute_dtype fp8, --compute-dtype fp8; docs/fp8.md) for a
// model with these params: it needs linear weights that read FP8 W / W^T
// (fp8_linear), each with rows and cols multiples of 16 (fp8b128's
// FormatTraits::eligible of W and of W^T: the FP8 GEMMs' N and K; edge tiles
// and 1x128 blocks may be partial): every GPT-2 width (d_model % 32 == 0)
// passes. Throws mxdp::Error with the one refusal every caller gives
// (`mxdp train` and `mxdp plan` among their options, naming `model`;
// Fp8Compute::apply, which the models' set_fp8_compute call); returns how
// many such weights there are. The engine adds its own rules (weight_format
// fp8b128, a model switched to FP8: DpOptions::validate, engine.cpp).
int check_fp8_compute(const std::vector<ParamSpec>& params, const std::string& model = "");

// What computes in FP8 under compute_dtype fp8: the linear layers of every
// block but those of the first `bf16_first` and the last `bf16_last` blocks,
// which compute with their dequantized fp8b128 weights as under compute_dtype
// bf16 (Megatron-LM's --first-last-layers-bf16, whose option names `mxdp
// train` takes: --num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16).
// Their weights still travel in fp8b128: only the GEMMs change.
struct Fp8Compute {
  bool on = false;
  int bf16_first = 0, bf16_last = 0;
  // Whether block b of n_blocks (0-based) computes its linears in FP8.
  bool fp8_block(int b, int n_blocks) const { return on && b >= bf16_first && b < n_blocks - bf16_last; }
  // Throws mxdp::Error unless both counts are >= 0 and leave at least one of
  // n_blocks blocks in FP8 (`model` names the model in the message).
  void check(int n_blocks, const std::string& model = "") const;
  // `params` as a model under this FP8 compute lists them: fp8_linear kept
  // only on the params of the blocks that compute in FP8, for a model whose
  // block b is layer b + 1 (ParamSpec::layer; GPT-2's and Llama's numbering).
  // Off: params unchanged. On: the counts checked (check), and the result
  // (check_fp8_compute).
  std::vector<ParamSpec> apply(std::vector<ParamSpec> params, int n_blocks, const std::string& model = "") const;
};

// "[768, 2304]", for messages.
inline std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// One micro-batch of next-token prediction: B sequences of T tokens.
struct Batch {
  const int32_t* inputs = nullptr;   // B*T token ids
  const int32_t* targets = nullptr;  // B*T next-token ids
  int B = 0;
  int T = 0;
};

// The dtype a model computes with and keeps its compute weights in.
enum class ComputeDType : uint8_t { F32, BF16 };
inline const char* to_string(ComputeDType t) { return t == ComputeDType::F32 ? "fp32" : "bf16"; }

// A weight as the FP8 GEMMs read it (docs/fp8.md, "Layout"), in the engine
// ops' memory space: E4M3 codes of a rows x cols row-major matrix and its
// 128x128 tile scales in cuBLASLt's BLK128x128_32F layout
// (fp8b128_scales_for_gemm: ceil(rows/128) x fp8b128_gemm_scale_ld(cols) fp32).
struct Fp8Weight {
  const uint8_t* codes = nullptr;
  const float* scales = nullptr;
  int64_t rows = 0, cols = 0;
};

class ModelHooks {
 public:
  virtual ~ModelHooks() = default;
  virtual void before_layer(int layer) = 0;
  virtual float* grad(int param) = 0;
  virtual void after_layer_backward(int layer) = 0;
  // FP8 compute: W of param i (forward) and W^T (backward's dgrad), above.
  virtual Fp8Weight fp8_weight(int param) { MXDP_FAIL("fp8_weight(", param, "): these hooks have no FP8 weights"); }
  virtual Fp8Weight fp8_weight_transposed(int param) {
    MXDP_FAIL("fp8_weight_transposed(", param, "): these hooks have no FP8 weights");
  }
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const std::vector<ParamSpec>& params() const = 0;
  virtual int num_layers() const = 0;
  // fp32 compute weights of param i (models whose compute_dtype() is not F32
  // throw: their weights are reached through compute_weights()).
  virtual float* weights(int param) = 0;
  virtual ComputeDType compute_dtype() const { return ComputeDType::F32; }
  // Param i's compute weights, in compute_dtype(), in the engine ops' memory space.
  virtual void* compute_weights(int param) { return weights(param); }
  // fp32 values the engine starts its masters from (after init_weights), in the
  // ops' memory space. Valid until release_initial_weights().
  virtual const float* initial_weights(int param) { return weights(param); }
  // The engine has taken the initial values (a GPU model frees its fp32 copy).
  virtual void release_initial_weights() {}
  // FP8 compute: whether the model's linear layers (the params with
  // fp8_linear) read ModelHooks::fp8_weight; the engine refuses compute_dtype
  // fp8 for a model that does not. set_fp8_compute({.on = true}) turns that
  // path on (an error for a model that has none); with blocks kept in bf16
  // (Fp8Compute) their linear weights' fp8_linear is false in params() from
  // then on, so the engine dequantizes them into compute weights as it does
  // every other param's.
  virtual bool reads_fp8_weights() const { return false; }
  virtual void set_fp8_compute(const Fp8Compute& c) {
    if (!c.on) return;
    check_fp8_compute(params());
    MXDP_FAIL("this model lists FP8 linear weights but has no FP8 compute path; use --compute-dtype bf16");
  }
  // Deterministic initialisation of the compute weights from a seed.
  virtual void init_weights(uint64_t seed) = 0;
  // Mean cross-entropy over the B*T targets. Keeps what backward needs.
  virtual float forward(const Batch& batch, ModelHooks& hooks) = 0;
  // The same forward with the mean loss written to *loss, in the engine ops'
  // memory space and ordered on the model's stream, instead of returned: no
  // host wait (the engine's steps use this). Pure, so that no device model or
  // wrapper can inherit a host write into device memory; a host model's is
  // `*loss = forward(batch, hooks)`.
  virtual void forward_into(const Batch& batch, ModelHooks& hooks, float* loss) = 0;
  // Gradient of the mean loss of the last forward, accumulated into hooks.grad(i).
  virtual void backward(ModelHooks& hooks) = 0;
};

// A language model on any device: what inference (sample, init-from, the
// weights of a checkpoint) needs beyond Model. The model registry
// (models/registry.h) builds them.
class LanguageModel : public Model {
 public:
  // Tokens and logits are over [0, vocab()); sequences are at most max_seq() long.
  virtual int vocab() const = 0;
  virtual int max_seq() const = 0;
  // Inference: forward without targets; fills the logits of every position.
  virtual void forward_logits(const int32_t* tokens, int B, int T, ModelHooks& hooks) = 0;
  // The vocab() real logits of position T-1 of sequence b of the last forward
  // (a host copy, fp32).
  virtual std::vector<float> logits_last(int b = 0) const = 0;
  // Sets param i's compute weights from fp32 host values (e.g. a checkpoint's
  // masters), converted to the compute dtype (bf16: round to nearest even).
  virtual void set_weights(int param, const float* host) = 0;
};

// Hooks for inference on weights that are already in place (e.g. a sampler
// that loaded a checkpoint into weights()): no freshness step, no gradients
// (grad() throws; defined in models/registry.cpp).
class NullHooks : public ModelHooks {
 public:
  void before_layer(int layer) override;
  float* grad(int param) override;
  void after_layer_backward(int layer) override;
};

}  // namespace mxdp
