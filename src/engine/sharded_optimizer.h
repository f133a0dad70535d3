// The optimizer step's results (Megatron-LM's DistributedOptimizer step): what a
// step returns, and the record of a launched step whose results are read late.
#pragma once

#include <cstdint>
#include <vector>

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

// A launched step whose result was not yet taken. It is "resolved" once its
// read-back (partials, control, losses in the engine's host slot `slot`) landed.
struct Launched {
  int64_t mark = 0;
  int slot = 0;
  bool resolved = false;
  StepResult r;
};

}  // namespace mxdp
