// ShardedOptimizer: the optimizer step of the engine (Megatron-LM's
// DistributedOptimizer step and clip_grads): the reduced grads' norm from
// per-shard partial sums, the step's scalars decided on the device (clip,
// skip), AdamW fused with the stage of every bucket (BucketSync::publish),
// and the step's results read back late, so that the host never waits inside
// a step.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "comm/comm.h"
#include "engine/bucket_sync.h"
#include "engine/buffers.h"
#include "engine/engine_ops.h"
#include "engine/layout.h"
#include "engine/optimizer.h"
#include "engine/options.h"

namespace mxdp {

struct StepResult {
  double loss = 0;        // mean train loss over micro-batches and ranks
  double grad_norm = 0;   // global grad norm before clipping
  double lr = 0;          // learning rate used
  bool skipped = false;   // non-finite gradients: no update was applied
  int64_t version = 0;    // optimizer updates applied after this step
  int64_t iteration = 0;  // 1-based: the step's place in the run (applied and skipped steps)
  std::vector<double> micro_losses;  // this rank's loss of each micro-batch, in order
};

class ShardedOptimizer {
 public:
  ShardedOptimizer(Communicator& comm, EngineOps& ops, const DpOptions& opt, const Layout& layout,
                   EngineBuffers& bufs, BucketSync& sync);

  // Where the model writes the loss of micro-batch i of this step (ops memory).
  float* micro_loss(int i) { return micro_losses_.data() + i; }

  // Launches the step over the reduced grads of the micro-batches behind it
  // (engine.h, launch_step) and advances the sync's version label.
  void launch();
  std::optional<StepResult> take_result(bool wait);
  int pending() const { return int(launched_.size()); }
  // Reads every launched step's result back (they stay takeable).
  void resolve_all();

  int64_t updates() { resolve_all(); return updates_; }
  int64_t iteration() const { return iteration_; }
  int64_t skipped_steps() { resolve_all(); return skipped_steps_; }
  // After a load: the counts of the loaded state (the sync's label follows).
  void set_loaded_counts(int64_t updates, int64_t iteration);

 private:
  // A launched step whose result was not yet taken. It is "resolved" once its
  // read-back (partials, control, losses in host slot `slot`) landed.
  struct Launched {
    int64_t mark = 0;
    int slot = 0;
    bool resolved = false;
    StepResult r;
  };
  int norm_row() const;  // partial sums per rank: one per bucket, then the loss sum
  void decide();         // reduce, norm partials, step_control: the step's scalars on the device
  void send_results(Launched& l);  // the read-back into l's host slot, and its mark
  void resolve(Launched& l);
  int unresolved() const;

  Communicator& comm_;
  EngineOps& ops_;
  const DpOptions& opt_;
  const Layout& layout_;
  EngineBuffers& bufs_;
  BucketSync& sync_;
  int rank_, dp_;
  DeviceArray<double> norm_partials_;  // [shard][bucket] sums of squares of one step
  DeviceArray<float> micro_losses_;    // this step's micro-batch losses (model writes)
  DeviceArray<StepControl> ctl_;       // the step's scalars, decided on the device
  std::deque<Launched> launched_;      // launched steps, results not yet taken (oldest first)
  HostArray<uint8_t> host_slots_[kMaxStepsInFlight];
  int next_slot_ = 0;
  // updates_ counts applied updates as far as read back (the AdamW count;
  // checkpoints store it as their version); the sync's label counts launched steps.
  int64_t updates_ = 0, iteration_ = 0, skipped_steps_ = 0;
};

}  // namespace mxdp
