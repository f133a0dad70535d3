// The engine's buffers on one rank (Megatron-LM's param_and_grad_buffer): per
// gather buffer of the layout, the fp32 grad buffer, the gathered payloads,
// the fp32 masters, AdamW moments and reduced grads of what this rank owns.
#pragma once

#include <cstdint>
#include <functional>
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
  int64_t fp8_weight_bytes = 0; // FP8 compute: every fp8b128 param's W and W^T as the GEMMs read them
  // Traffic of one optimizer step (allocated(): measured over the last step, from
  // the end of the previous optimizer step to the end of this one).
  int64_t gather_bytes = 0;     // all-gathered payload (every rank's slices; reference: fp32 grads)
  int64_t reduce_bytes = 0;     // reduce-scatter input of this rank (none where main grads alias
                                // the fp32 grad buffer: a one-rank reduce-scatter is a copy)
  int64_t total_bytes() const {
    return master_bytes + adam_bytes + main_grad_bytes + grad_bytes + grad_reduce_bytes + payload_bytes +
           fp8_weight_bytes;
  }
  bool operator==(const MemoryPlan&) const = default;
};
MemoryPlan plan_memory(const std::vector<ParamSpec>& params, const Layout& layout, const DpOptions& opt);

// One gather buffer's memory on this rank; arrays live in the engine ops' memory space.
struct BufferState {
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
  DeviceArray<float> amax;           // tensor-amax formats: per bucket, one amax per param of the bucket
  std::vector<int64_t> amax_off;     // per bucket: its first slot in amax
};

// FP8 compute (DpOptions::fp8_compute): one fp8b128 param as the model's
// GEMMs read it (docs/fp8.md, "The engine"). W's codes are read in place in
// the gathered payload where they lie there whole, in one piece of one shard
// (every param at dp 1); a param that a shard cut splits (its pieces' codes
// have their shards' scales between them) gets its own contiguous copy,
// rebuilt at each unpack. W's tile scales in the GEMM layout are written at
// each unpack, W^T from W once per step, before the first dgrad.
struct Fp8Store {
  const uint8_t* codes = nullptr;   // W's codes, rows x cols: in the payload, or own_codes
  DeviceArray<uint8_t> own_codes;   // only for a param split by a shard cut
  DeviceArray<uint8_t> codes_t;     // cols x rows
  DeviceArray<float> gemm, gemm_t;  // the tile scales of W and W^T, in the GEMM layout
  bool in_place() const { return own_codes.size() == 0; }
};
// Where param p's W codes are read in place in bucket b's payload: the one
// piece of one shard that holds all its codes, and that shard; none (false)
// where a shard cut splits them or the payload is the grad buffer (backward
// would overwrite it while the next micro-batch's forward still reads W).
struct InPlaceCodes {
  int shard = -1;
  const Piece* piece = nullptr;
  explicit operator bool() const { return piece != nullptr; }
};
InPlaceCodes fp8_codes_in_place(const Bucket& b, int p, int64_t numel, bool payload_in_grad_buffer);
// The bytes of one param's Fp8Store: W^T's codes, both scale grids, and W's
// codes unless they are read in place.
int64_t fp8_store_bytes(int64_t rows, int64_t cols, bool codes_in_place);

// The buffers of every gather buffer of the layout, and where a bucket's
// pieces live in them. Memory only: the freshness chain over it is BucketSync's.
class EngineBuffers {
 public:
  EngineBuffers(const Layout& layout, const DpOptions& opt, EngineOps& ops, int rank, int dp,
                const std::vector<ParamSpec>& params);

  int size() const { return int(buf_.size()); }
  BufferState& operator[](int f) { return buf_[f]; }
  const BufferState& operator[](int f) const { return buf_[f]; }

  uint8_t* payload_ptr(int f, int b);  // start of the bucket's gathered payload
  // Offset of shard s of bucket b in buffer f's master/m/v/main_grad.
  int64_t shard_local_off(int f, int b, int s) const;
  bool owns(int s) const { return !opt_.distributed_optimizer || s == rank_; }
  bool reused(int f) const;  // buffer f's payload lives in its grad buffer
  float* param_amax(int p);  // tensor amax of param p (its last stage), ops memory
  Fp8Store& fp8(int p);      // FP8 compute: param p's store (an error for a param without one)

  // fn(buffer, piece, offset of the piece in master/m/v/main_grad) for every
  // param piece of every shard this rank owns (for_each_owned_piece), or of
  // shard `s` alone (for_each_shard_piece; empty pieces skipped).
  using PieceFn = std::function<void(int, const Piece&, int64_t)>;
  void for_each_owned_piece(const PieceFn& fn);
  void for_each_shard_piece(int s, const PieceFn& fn);

  // Masters and moments to zero (a load replaces them).
  void zero_state();
  // The buffers held; traffic of the last step as the caller measured it.
  MemoryPlan allocated(const std::vector<ParamSpec>& params, int64_t gather_bytes, int64_t reduce_bytes) const;

 private:
  const Layout& layout_;
  const DpOptions& opt_;
  EngineOps& ops_;
  int rank_, dp_;
  std::vector<BufferState> buf_;
  std::vector<int> amax_slot_;  // per param: its slot in its bucket's tensor amaxes
  std::vector<Fp8Store> fp8_;   // per param (empty unless FP8 compute reads it)

  void make_fp8_store(int f, int b, int p, const ParamSpec& spec);
};

}  // namespace mxdp
