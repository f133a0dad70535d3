// BucketSync: the parameter and gradient syncs of the engine, bucket by bucket
// (Megatron-LM's _ParamAndGradBucketGroup): the freshness chain
//     master (always v) -> staged -> gathered -> weights [-> transposed]
// (the transposed link: FP8 compute's W^T, bucket_sync_fp8.cpp) driven by the model's forward hooks (stage, start/finish gather, unpack,
// check), and the gradient reduce-scatters driven by its backward hooks.
// docs/engine.md, "The chain", tells the rules; engine.h the version label.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "comm/comm.h"
#include "engine/buffers.h"
#include "engine/engine_ops.h"
#include "engine/layout.h"
#include "engine/optimizer.h"
#include "engine/options.h"
#include "models/model.h"

namespace mxdp {

// What a bucket's grad region holds (grad-buffer reuse).
enum class Region : uint8_t { Idle, Grads, Payload };

// One bucket's place on the freshness chain, and its collectives in flight.
struct BucketState {
  int64_t staged_v = -1, gathered_v = -1, weights_v = -1;
  int64_t transposed_v = -1;      // FP8 compute: the weights version its W^T was made from
  std::unique_ptr<Work> gather;   // dispatched all-gather, carries gather_v
  int64_t gather_v = -1;
  bool gather_done = false;       // waited for, record kept (only under a test fault, faults.h)
  std::unique_ptr<Work> reduce;   // reduce-scatter in flight (none when it is a no-op: aliased)
  bool reducing = false;          // start_reduce ran, finish_reduce not yet
  Region region = Region::Idle;   // what the bucket's grad region holds (reuse)
  int grads_pending = 0;          // params whose grads are not yet complete
};

class BucketSync final : public ModelHooks {
 public:
  BucketSync(Model& model, Communicator& comm, EngineOps& ops, const DpOptions& opt,
             const std::vector<ParamSpec>& params, const Layout& layout, EngineBuffers& bufs);

  // The freshness label: one more per launched step (applied or skipped).
  int64_t version() const { return version_; }
  void advance() { ++version_; }
  // After a load: the label of the loaded masters; nothing derived from the
  // old ones survives.
  void restart_at(int64_t version);

  // ---- forward: the model's before_layer drives the chain bucket by bucket
  void begin_forward(bool eval);  // a forward starts (its first layer comes next)
  void end_forward() { in_eval_ = false; }
  void sync_all();                // every bucket's weights at the latest version

  // ---- the optimizer step's side: AdamW fused with the stage of every bucket,
  // then the gathers (or, overlapped, the first one and the rest deferred).
  struct Update {
    float lr;
    int64_t first_t;          // the AdamW count this update has if no unread step was skipped
    const StepControl* ctl;   // the step's scalars, ops memory
  };
  void publish(const Update& u);

  // ---- backward: the model's hooks complete grads and start the reduces
  // (overlap), or the last micro-batch starts them all at its end.
  void backward(Model& model, bool first_micro, bool last_micro);
  void finish_reduces();      // every bucket's reduced grads in main_grad
  void drop_inflight();       // waits for and forgets every collective in flight

  // Traffic since the last close, and that of the step before.
  void close_traffic_window();

  // FP8 compute (ModelHooks; also for the engine's callers between forwards):
  // W of param p, fresh at the latest version; W^T, made from W once per
  // version on first use (backward), checked fresh (an error otherwise).
  Fp8Weight fp8_weight(int param) override;
  Fp8Weight fp8_weight_transposed(int param) override;
  int64_t last_step_gather_bytes() const { return last_gather_bytes_; }
  int64_t last_step_reduce_bytes() const { return last_reduce_bytes_; }

 private:
  void before_layer(int layer) override;  // ModelHooks
  float* grad(int param) override;
  void after_layer_backward(int layer) override;

  void weights_for_forward(int f, int b);
  void stage(int f, int b, const Update* u = nullptr);  // u: AdamW first, fused
  // What stage() writes to: the bucket of buffer f, its state and its payload.
  struct Staging {
    const GatherBuffer& gb;
    const Bucket& bk;
    BufferState& bs;
    PayloadShape ps;
    const FormatTraits& ft;
    uint8_t* base;  // the payload's first shard slot
  };
  // stage() by the format's scales: one per tensor, per 128x128 tile, per row block.
  void stage_tensor_scaled(const Staging& t, int f, int b, const Update* u);
  void stage_slabs(const Staging& t, int f, int b, const Update* u);
  void stage_rows(const Staging& t, int f, int b, const Update* u);
  AdamWChoice adamw_for(const Update& u, bool decay) const;  // the step's AdamW for a decay class
  std::array<AdamWChoice, 2> stage_choices(const Update& u) const;  // both, at kNoDecay and kWithDecay
  void make_stage_ranges();
  void start_gather(int f, int b);
  void finish_gather(int f, int b);
  void unpack(int f, int b);
  bool reads_fp8(int param) const;   // the model reads it as FP8 W / W^T (bucket_sync_fp8.cpp)
  void fp8_unpack(int f, int b);     // bucket_sync_fp8.cpp
  void fp8_transpose(int f, int b);  // bucket_sync_fp8.cpp
  void check_fresh(int param) const;
  void begin_backward();
  void start_reduce(int f, int b);
  void finish_reduce(int f, int b);

  // A list an op reads from ops memory in one launch, with the host's copy:
  // hold() uploads only a list that differs from the one held (the pointers
  // of a bucket's pieces are fixed, so in practice once).
  template <class T>
  struct DeviceTable {
    std::vector<T> host;  // what dev holds
    DeviceArray<T> dev;
    void hold(EngineOps& ops, std::vector<T> list) {
      if (list.size() == host.size() &&
          (list.empty() || std::memcmp(list.data(), host.data(), list.size() * sizeof(T)) == 0))
        return;
      dev = DeviceArray<T>(ops, list.size());
      ops.copy_from_host(dev.data(), list.data(), list.size() * sizeof(T));
      host = std::move(list);
    }
  };
  struct UnpackTable : DeviceTable<UnpackPiece> {
    int64_t max_len = 0;
  };
  // A bucket's fp8b128 weights: the unpack's scale jobs (a piece each) and
  // the transposes (a weight each).
  struct Fp8Tables {
    DeviceTable<Fp8b128Job> scales, transposes;
  };

  Model& model_;
  Communicator& comm_;
  EngineOps& ops_;
  const DpOptions& opt_;
  const std::vector<ParamSpec>& params_;
  const Layout& layout_;
  EngineBuffers& bufs_;
  int rank_, dp_;
  std::vector<std::vector<BucketState>> st_;      // [buffer][bucket]
  std::vector<std::vector<UnpackTable>> unpack_;  // [buffer][bucket], filled at the first unpack
  std::vector<std::vector<Fp8Tables>> fp8_tables_;  // [buffer][bucket], filled at first use
  // The AdamW choices of a stage's ranges (AdamWRange::choice).
  static constexpr int32_t kNoDecay = 0, kWithDecay = 1;
  // [buffer][bucket][shard]: an owned shard's ranges for the fused AdamW +
  // stage in one pass (formats without a tensor amax; else empty): a row-block
  // format's decay runs, a slab format's pieces.
  std::vector<std::vector<std::vector<std::unique_ptr<AdamWRanges>>>> stage_ranges_;
  std::vector<std::pair<int, int>> fwd_order_;    // buckets in forward order
  std::vector<std::vector<int>> layer_params_;    // params whose first layer is L
  DeviceArray<float> zero_amax_;  // 0: the tensor amax a payload's padding is quantized with
  int64_t version_ = 0;
  int64_t gather_bytes_ = 0, reduce_bytes_ = 0;  // since the window opened
  int64_t last_gather_bytes_ = 0, last_reduce_bytes_ = 0;
  size_t cursor_ = 0;  // next bucket (forward order) the running forward will need
  bool in_eval_ = false, in_backward_ = false, last_micro_ = false;
};

}  // namespace mxdp
