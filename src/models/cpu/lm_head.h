// What every CPU language model does around its LM head: the checks of a
// batch's tokens, the cross-entropy over the logits and its gradient, and the
// logits of the last forward with the rules for reading them (LmOutput).
//
// Logits are rows of Vp floats, of which the first V are the vocabulary's
// (V = Vp unless the model pads its head for the GEMM's sake); the loss and
// its softmax see only those, and a padding column's gradient is 0.
#pragma once

#include <cstdint>
#include <vector>

#include "models/model.h"

namespace mxdp::cpu {

// Throws unless 1 <= B, 1 <= T <= max_seq, tokens non-null and every token in [0, vocab).
void check_inputs(const int32_t* tokens, int B, int T, int vocab, int max_seq);
// Throws unless targets is non-null and each of its n values is in [0, vocab).
void check_targets(const int32_t* targets, int64_t n, int vocab);

// losses[m] = logsumexp(z_m[0..V)) - z_m[target m] for each of the BT rows z_m;
// returns their mean (summed in row order in double).
float cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t BT, int V, int Vp);
// In place: the logits become the gradient of that mean, (softmax - onehot) / BT
// on [0, V) and 0 on [V, Vp).
void cross_entropy_backward(float* logits, const int32_t* targets, int64_t BT, int V, int Vp);

// The logits of a model's last forward, its targets and losses, and what may
// follow: logits() after any forward, one backward (dlogits()) after a forward
// with targets. A model's forward and forward_logits are this class's, around
// the model's own `run` (its layers, whose head GEMM writes buffer()).
class LmOutput {
 public:
  LmOutput(int vocab, int padded_vocab) : V_(vocab), Vp_(padded_vocab) {}

  // LanguageModel::forward: checks the batch's targets, runs the model's
  // forward (run()), returns the mean cross-entropy.
  template <class Run>
  float forward(const Batch& batch, Run&& run) {
    state_ = State::kNone;  // an exception leaves nothing to read
    check_targets(batch.targets, int64_t(batch.B) * batch.T, V_);
    run();
    return loss(batch.targets);
  }
  // LanguageModel::forward_logits: runs the model's forward without targets.
  template <class Run>
  void forward_logits(Run&& run) {
    state_ = State::kNone;
    run();
    state_ = State::kLogits;
  }

  // Sized for a B x T forward (re-allocated only when B or T changes).
  void resize(int B, int T);
  float* buffer() { return logits_.data(); }  // [B*T, Vp]: where the head writes
  // The gradient of the loss with respect to the logits, in their place (so
  // once per forward with targets; throws otherwise). [B*T, Vp].
  float* dlogits();

  // Vp floats: the logits of sequence b, position t (throws outside the last
  // forward's B x T, or when backward has turned them into gradients).
  const float* logits(int b, int t) const;
  // The V real logits of position T-1 of sequence b (what a sampler needs).
  std::vector<float> logits_last(int b) const;

 private:
  enum class State { kNone, kLogits, kLoss, kBackwardDone };
  // The head has written the logits of a forward with these (checked) targets.
  float loss(const int32_t* targets);

  int V_, Vp_;
  int B_ = 0, T_ = 0;
  std::vector<float> logits_;  // logits, then (backward) their gradient
  std::vector<float> losses_;  // [B*T]
  std::vector<int32_t> targets_;
  State state_ = State::kNone;
};

}  // namespace mxdp::cpu
