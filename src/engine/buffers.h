// The engine's buffers on one rank (Megatron-LM's param_and_grad_buffer): per
// gather buffer of the layout, the fp32 grad buffer, the gathered payloads,
// the fp32 masters, AdamW moments and reduced grads of what this rank owns,
// and per bucket its place on the freshness chain (engine.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/comm.h"
#include "engine/engine_ops.h"
#include "engine/layout.h"
#include "engine/options.h"
#include "models/model.h"

namespace mxdp {

// What the engine allocates on one rank, and what it moves per optimizer step.
// plan_memory() predicts it from the layout alone (for `mxdp plan`, before any
// memory exists); DataParallel::allocated() measures the real buffers, and the
// tests hold the two equal.
struct MemoryPlan {
  int64_t params = 0;           // real parameter elements
  int64_t laid_out = 0;         // elements in the buffers, padding included
  int64_t master_bytes = 0;     // fp32 master weights held by this rank
  int64_t adam_bytes = 0;       // AdamW m and v held by this rank
  int64_t main_grad_bytes = 0;  // reduced fp32 gradients of what this rank updates (0 where they
                                // are the grad buffer itself: dp 1, payload not in the grad buffer)
  int64_t grad_bytes = 0;       // grad buffer (fp32, where backward accumulates)
  int64_t grad_reduce_bytes = 0;  // bf16 reduce-scatter staging (grad_reduce_dtype bf16)
  int64_t payload_bytes = 0;    // gathered parameter payloads outside the grad buffer
  // Traffic of one optimizer step (allocated(): measured over the last step, from
  // the end of the previous optimizer step to the end of this one).
  int64_t gather_bytes = 0;     // all-gathered payload (every rank's slices; reference: fp32 grads)
  int64_t reduce_bytes = 0;     // reduce-scatter input of this rank (none where main grads alias
                                // the fp32 grad buffer: a one-rank reduce-scatter is a copy)
  int64_t total_bytes() const {
    return master_bytes + adam_bytes + main_grad_bytes + grad_bytes + grad_reduce_bytes + payload_bytes;
  }
  bool operator==(const MemoryPlan&) const = default;
};
MemoryPlan plan_memory(const std::vector<ParamSpec>& params, const Layout& layout, const DpOptions& opt);

// What a bucket's grad region holds (grad-buffer reuse).
enum class Region : uint8_t { Idle, Grads, Payload };
// One bucket's place on the freshness chain, and its collectives in flight.
struct BucketState {
  int64_t staged_v = -1, gathered_v = -1, weights_v = -1;
  std::unique_ptr<Work> gather;   // dispatched all-gather, carries gather_v
  int64_t gather_v = -1;
  bool gather_done = false;       // waited for, record kept (only under a test fault, faults.h)
  std::unique_ptr<Work> reduce;   // reduce-scatter in flight (none when it is a no-op: aliased)
  bool reducing = false;          // start_reduce ran, finish_reduce not yet
  Region region = Region::Idle;   // what the bucket's grad region holds (reuse)
  int grads_pending = 0;          // params whose grads are not yet complete
};
struct UnpackTable {
  std::vector<UnpackPiece> host;  // what dev holds
  DeviceArray<UnpackPiece> dev;
  int64_t max_len = 0;
};
struct BufferState {  // arrays live in the engine ops' memory space
  DeviceArray<float> grad;           // numel: where backward accumulates
  DeviceArray<uint16_t> grad_bf16;   // numel, only with grad_reduce_dtype bf16
  DeviceArray<uint16_t> shard_bf16;  // all shards, bf16 reduce output
  DeviceArray<uint8_t> payload;      // gathered payloads (unless reuse)
  std::vector<int64_t> payload_off;  // per bucket: byte offset in payload
  std::vector<int64_t> local_off;    // per bucket: offset of its owned range in master/m/v/main_grad
  std::vector<int64_t> shard_off;    // per bucket: offset of its shard in shard_bf16
  DeviceArray<float> master, m, v;
  DeviceArray<float> main_grad_own;  // reduced grads, unless they alias the grad buffer
  float* main_grad = nullptr;        // master.size() elements: main_grad_own, or grad itself
  bool aliased = false;              // main_grad == grad (dp 1, payload not in the grad buffer)
  DeviceArray<float> amax;           // NVFP4: per bucket, one tensor amax per param of the bucket
  std::vector<int64_t> amax_off;     // per bucket: its first slot in amax
  std::vector<BucketState> st;
  std::vector<UnpackTable> unpack;   // per bucket: its unpack's pieces (filled at the first unpack)
};

}  // namespace mxdp
