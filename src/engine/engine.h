// DataParallel: the data-parallel core of mxdp (docs/engine.md, "State per
// bucket" and "The chain").
//
// Each rank owns shard r of every bucket: fp32 master weights, AdamW moments and
// the reduced gradients of that shard. After an optimizer step the shard is
// quantized ("staged") into rank r's slice of the bucket's gather payload, and
// one all-gather per bucket gives every rank the whole bucket again, which is
// dequantized ("unpacked") into the model's compute weights.
//
// Freshness is versions, not flags. v = number of optimizer updates applied.
// Every bucket records the version at each link of the chain:
//     master (always v) -> staged -> gathered -> weights
// weights_for_forward(bucket) drives the chain until weights == v: stage if
// staged < v, gather if gathered < v, unpack if weights < gathered, and then
// checks weights == v, failing loudly otherwise. Train forwards, evals, the first
// step after a load: all go through this one chain; overlap only changes when
// each link runs (eagerly after the step, or deferred to the layer that needs it).
//
// Reference mode (distributed_optimizer off) is the same engine with the gather
// removed: every rank keeps full masters and moments, gradients are summed by
// reduce-scatter + all-gather, and every rank stages all shards itself. The
// parity contract: the two modes give bitwise equal losses and weights.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "engine/bucket_sync.h"
#include "engine/buffers.h"
#include "engine/engine_ops.h"
#include "engine/layout.h"
#include "engine/options.h"
#include "engine/sharded_checkpoint.h"
#include "engine/sharded_optimizer.h"
#include "models/model.h"

namespace mxdp {

// The facade: it reads as the life of a step, and each part of a step is a
// class of its own (the members below).
class DataParallel final {
 public:
  // The model's weights must already be initialised (identically on every rank):
  // they become the fp32 masters. `ops` does the memory work in the model's and
  // the communicator's memory space (nullptr: the CPU ops, owned by the engine).
  DataParallel(Model& model, Communicator& comm, const DpOptions& opt, EngineOps* ops = nullptr);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // One optimizer step over options().micro_batches micro-batches; waits for
  // its result (optimizer_step()).
  StepResult train_step(const std::vector<Batch>& micro_batches);
  // The parts of train_step, for callers that interleave (e.g. an eval between
  // micro-batches): forward + backward of one micro-batch (its loss arrives in
  // StepResult::micro_losses); then, after micro_batches of them, the step.
  void forward_backward(const Batch& batch);
  // launch_step() and the wait for its result (earlier results not yet taken
  // are dropped).
  StepResult optimizer_step();

  // The optimizer step without a host wait: grad norm, clip coefficient and the
  // skip decision are made on the device and read there by AdamW, so the host
  // returns at once and can submit the next step while this one runs. Its
  // result comes from take_result(). The host stays at most kMaxStepsInFlight
  // steps ahead: launching waits, if need be, for the step
  // kMaxStepsInFlight back (long done when the device is busy).
  void launch_step();
  // The oldest launched step's result not yet taken, each once: wait = false
  // returns it only if already read back (never blocks); wait = true blocks
  // for it. Empty when every result was taken.
  std::optional<StepResult> take_result(bool wait);
  // Launched steps whose results were not taken yet.
  int results_pending() const { return optim_.pending(); }

  // Collective: makes the model's compute weights those of the latest step
  // (the same chain a forward drives), e.g. before sampling from the model.
  void sync_weights();
  // FP8 compute (compute_dtype fp8): param i's W as the forward reads it
  // (ModelHooks::fp8_weight), e.g. after sync_weights; fresh or an error.
  Fp8Weight fp8_weight(int param) { return sync_.fp8_weight(param); }

  // Mean loss over the batches and all ranks; forward only, same freshness chain.
  double eval(const std::vector<Batch>& batches);

  // Collective. Writes the step directory `path` (checkpoint.h): every rank
  // writes the pieces of its own shards into its rank file, in parallel, then
  // rank 0 writes the manifest and renames the directory into place, so `path`
  // is complete or absent (an older `path` is replaced atomically). `extra` is
  // stored verbatim. Refuses (every rank throws) when any master or AdamW moment
  // is not finite: a diverged state never replaces a good checkpoint.
  void save_checkpoint(const std::string& path, const nlohmann::json& extra);
  // Collective. Loads a step directory written at any dp (or a version-1
  // single-file checkpoint); each rank reads only the ranges it owns. Returns
  // `extra`. The low-precision weights are derived again from the loaded fp32
  // masters by the freshness chain at the next forward. An error on any rank is
  // thrown on every rank; a corrupt data chunk found midway leaves this engine's
  // masters partly loaded (load again or discard the engine).
  nlohmann::json load_checkpoint(const std::string& path);

  // Collective: full fp32 master weights of param i.
  std::vector<float> full_master(int param);

  // Optimizer updates applied (reads every launched step's result back first).
  int64_t version();
  int64_t iteration() const { return optim_.iteration(); }
  int64_t skipped_steps();  // likewise
  const Layout& layout() const { return layout_; }
  // The buffers this rank holds right now (see MemoryPlan).
  MemoryPlan allocated() const;
  const DpOptions& options() const { return opt_; }
  Communicator& comm() { return comm_; }

 private:
  Model& model_;
  Communicator& comm_;
  std::unique_ptr<EngineOps> own_ops_;
  EngineOps* ops_;
  DpOptions opt_;
  std::vector<ParamSpec> params_;
  Layout layout_;
  EngineBuffers bufs_;      // buffers.h: the memory
  BucketSync sync_;         // bucket_sync.h: the freshness chain and the reduces
  ShardedOptimizer optim_;  // sharded_optimizer.h: the step, its results read late
  ShardedCheckpoint ckpt_;  // sharded_checkpoint.h: save, load, full masters
  int micro_ = 0;           // micro-batches accumulated in this step
};

}  // namespace mxdp
