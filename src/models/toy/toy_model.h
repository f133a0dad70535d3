// ToyModel: the smallest model that exercises every part of the Model
// interface: a token embedding, a residual tanh MLP (two 2-D weights with
// biases), an RMS norm and an untied LM head, trained on next-token
// cross-entropy. Four layers: 0 embedding, 1 MLP up, 2 MLP down, 3 norm + head.
// Written for the data-parallel core's tests (fast enough to run the whole
// lifecycle matrix at dp 1..4 in seconds) and as a worked example of the
// interface. Deterministic: sequential loops only.
#pragma once

#include "models/model.h"

namespace mxdp {

class ToyModel final : public Model {
 public:
  // d and h must be multiples of 32 so that every 2-D weight is gather-eligible.
  ToyModel(int vocab = 64, int d = 32, int h = 64);
  const std::vector<ParamSpec>& params() const override { return specs_; }
  int num_layers() const override { return 4; }
  float* weights(int param) override { return w_[param].data(); }
  void init_weights(uint64_t seed) override;
  float forward(const Batch& batch, ModelHooks& hooks) override;
  void forward_into(const Batch& b, ModelHooks& h, float* loss) override { *loss = forward(b, h); }  // host memory
  void backward(ModelHooks& hooks) override;

 private:
  enum { kEmb, kW1, kB1, kW2, kB2, kNorm, kHead };
  int V_, D_, H_;
  std::vector<ParamSpec> specs_;
  std::vector<std::vector<float>> w_;
  // activations of the last forward
  std::vector<int32_t> tok_, tgt_;
  std::vector<float> x0_, hid_, x1_, rinv_, y_, prob_;
};

}  // namespace mxdp
