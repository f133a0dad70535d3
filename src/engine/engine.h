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
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "engine/buffers.h"
#include "engine/engine_ops.h"
#include "engine/layout.h"
#include "engine/options.h"
#include "engine/sharded_optimizer.h"
#include "models/model.h"

namespace mxdp {

struct CheckpointManifest;
struct CheckpointParam;
struct RankFileInfo;

// The declaration reads as the life of a step; each part is defined in its own
// file: buffers.cpp, bucket_sync.cpp, sharded_optimizer.cpp, sharded_checkpoint.cpp.
class DataParallel final : private ModelHooks {
 public:
  // The model's weights must already be initialised (identically on every rank):
  // they become the fp32 masters. `ops` does the memory work in the model's and
  // the communicator's memory space (nullptr: the CPU ops, owned by the engine).
  DataParallel(Model& model, Communicator& comm, const DpOptions& opt, EngineOps* ops = nullptr);
  ~DataParallel() override;
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
  int results_pending() const { return int(launched_.size()); }

  // Collective: makes the model's compute weights those of the latest step
  // (the same chain a forward drives), e.g. before sampling from the model.
  void sync_weights();

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
  int64_t iteration() const { return iteration_; }
  int64_t skipped_steps();  // likewise
  const Layout& layout() const { return layout_; }
  // The buffers this rank holds right now (see MemoryPlan).
  MemoryPlan allocated() const;
  const DpOptions& options() const { return opt_; }
  Communicator& comm() { return comm_; }

 private:
  // ---- buffers.cpp: where a bucket's pieces live
  uint8_t* payload_ptr(int f, int b);  // start of the bucket's gathered payload
  int64_t shard_local_off(int f, int b, int s) const;
  bool owns(int s) const { return !opt_.distributed_optimizer || s == rank_; }
  bool reused(int f) const;  // buffer f's payload lives in its grad buffer
  // fn(buffer, piece, offset of the piece in master/m/v/main_grad) for every
  // param piece of every shard this rank owns.
  using PieceFn = std::function<void(int, const Piece&, int64_t)>;
  void for_each_owned_piece(const PieceFn& fn);

  // ---- bucket_sync.cpp: forward (the freshness chain), backward (the reduces)
  void before_layer(int layer) override;  // ModelHooks
  float* grad(int param) override;
  void after_layer_backward(int layer) override;
  void weights_for_forward(int f, int b);
  void start_gather(int f, int b);
  void finish_gather(int f, int b);
  // The optimizer's update of one bucket (AdamW on every owned piece), done by
  // stage() in the same pass as the quantize.
  struct Update {
    float lr;
    int64_t first_t;  // the AdamW count this update has if no unread step was skipped (AdamWChoice)
  };
  void stage(int f, int b, const Update* u = nullptr);  // u: AdamW first, fused
  void unpack(int f, int b);
  void check_fresh(int param) const;
  const float* param_amax(int p) const;  // tensor amax of param p (last stage), ops memory
  void begin_backward();
  void start_reduce(int f, int b);
  void finish_reduce(int f, int b);
  void drop_inflight();

  // ---- sharded_optimizer.cpp: the step, its results read late
  int norm_row() const;  // partial sums per rank: one per bucket, then the loss sum
  void decide_step();    // reduce, norm partials, step_control: the step's scalars on the device
  void apply_step(const Update& u);  // AdamW + stage of every bucket, then the gathers
  void send_results(Launched& l);    // the read-back into l's host slot, and its mark
  void resolve(Launched& l);
  void resolve_all();
  int unresolved() const;
  void close_traffic_window();
  void set_loaded_counts(int64_t updates, int64_t iteration);

  // ---- sharded_checkpoint.cpp
  std::vector<float> full_bucket(const DeviceArray<float>& local, int f, int b);  // collective, to host
  void on_every_rank(const std::function<void()>& fn);  // an error on any rank, thrown on all
  std::vector<uint8_t> broadcast_bytes(std::vector<uint8_t> bytes);  // rank 0's bytes to every rank
  void for_each_written_piece(const PieceFn& fn);  // the pieces this rank's file holds: shard rank_
  void check_state_finite(const std::string& path);
  RankFileInfo write_rank_file(const std::string& dir);
  void check_params_match(const std::string& path, const std::vector<CheckpointParam>& ps) const;
  void reset_state_for_load();
  nlohmann::json load_step_directory(const std::string& path, CheckpointManifest m);
  nlohmann::json load_single_file(const std::string& path, const std::vector<uint8_t>& bytes);

  // ---- state
  Model& model_;
  Communicator& comm_;
  std::unique_ptr<EngineOps> own_ops_;
  EngineOps* ops_;
  DpOptions opt_;
  int rank_, dp_;
  std::vector<ParamSpec> params_;
  Layout layout_;
  std::vector<BufferState> buf_;
  std::vector<std::pair<int, int>> fwd_order_;  // buckets in forward order
  std::vector<std::vector<int>> layer_params_;  // params whose first layer is L
  std::vector<int> amax_slot_;                  // per param: its slot in its bucket's tensor amaxes
  DeviceArray<double> norm_partials_;           // [shard][bucket] sums of squares of one step
  DeviceArray<float> micro_losses_;             // this step's micro-batch losses (model writes)
  DeviceArray<StepControl> ctl_;                // the step's scalars, decided on the device
  DeviceArray<float> zero_amax_;                // 0: the tensor amax a payload's padding is quantized with
  std::deque<Launched> launched_;               // launched steps, results not yet taken (oldest first)
  HostArray<uint8_t> host_slots_[kMaxStepsInFlight];
  int next_slot_ = 0;
  // version_ is the freshness label: one more per launched step, applied or
  // skipped (a skipped step restages the same masters: the same bits under a
  // new label). updates_ counts applied updates as far as read back (the AdamW
  // count; checkpoints store it as their version).
  int64_t version_ = 0, updates_ = 0, iteration_ = 0, skipped_steps_ = 0;
  int64_t gather_bytes_ = 0, reduce_bytes_ = 0;  // since the last optimizer step
  int64_t last_step_gather_bytes_ = 0, last_step_reduce_bytes_ = 0;
  int micro_ = 0;          // micro-batches accumulated in this step
  size_t cursor_ = 0;      // next bucket (forward order) the running forward will need
  bool in_eval_ = false;
  bool in_backward_ = false;
};

}  // namespace mxdp
