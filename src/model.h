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

namespace mxdp {

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;  // row-major; 2-D weights are {rows, cols}
  int layer = 0;               // first forward layer that reads it
  bool decay = true;           // decoupled weight decay applies (false for 1-D params)

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  // Eligible for the low-precision gather: a 2-D weight whose rows hold whole
  // 32-element blocks. Everything else travels in BF16.
  bool lowp_eligible() const { return shape.size() == 2 && shape[1] % 32 == 0; }
};

// One micro-batch of next-token prediction: B sequences of T tokens.
struct Batch {
  const int32_t* inputs = nullptr;   // B*T token ids
  const int32_t* targets = nullptr;  // B*T next-token ids
  int B = 0;
  int T = 0;
};

class ModelHooks {
 public:
  virtual ~ModelHooks() = default;
  virtual void before_layer(int layer) = 0;
  virtual float* grad(int param) = 0;
  virtual void after_layer_backward(int layer) = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const std::vector<ParamSpec>& params() const = 0;
  virtual int num_layers() const = 0;
  virtual float* weights(int param) = 0;
  // Deterministic initialisation of the compute weights from a seed.
  virtual void init_weights(uint64_t seed) = 0;
  // Mean cross-entropy over the B*T targets. Keeps what backward needs.
  virtual float forward(const Batch& batch, ModelHooks& hooks) = 0;
  // Gradient of the mean loss of the last forward, accumulated into hooks.grad(i).
  virtual void backward(ModelHooks& hooks) = 0;
};

}  // namespace mxdp
