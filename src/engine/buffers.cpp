// The engine's memory: what plan_memory predicts from the layout alone, what
// allocated() measures, and where a bucket's pieces live in it.
#include "engine/buffers.h"

#include "engine/engine.h"

namespace mxdp {

MemoryPlan plan_memory(const std::vector<ParamSpec>& params, const Layout& layout, const DpOptions& opt) {
  MemoryPlan m;
  const int dp = layout.dp;
  for (const auto& p : params) m.params += p.numel();
  for (const GatherBuffer& gb : layout.buffers) {
    m.laid_out += gb.numel;
    m.grad_bytes += gb.numel * int64_t(sizeof(float));
    const bool reused = opt.payload_in_grad_buffer(gb.format);
    // At dp 1 the reduce-scatter is a copy: the main grads are the grad buffer
    // itself, unless that buffer also holds the gathered payload (reuse).
    const bool aliased = dp == 1 && !reused;
    for (const Bucket& b : gb.buckets) {
      const int64_t owned = opt.distributed_optimizer ? b.shard_numel : b.numel;
      m.master_bytes += owned * int64_t(sizeof(float));
      m.adam_bytes += 2 * owned * int64_t(sizeof(float));
      if (!aliased) m.main_grad_bytes += owned * int64_t(sizeof(float));
      const int64_t payload = dp * payload_shape(gb.format, b.shard_numel).shard_bytes;
      if (!reused) m.payload_bytes += payload;
      if (opt.distributed_optimizer) m.gather_bytes += payload;
      if (opt.grad_reduce_dtype == GradReduceDType::Bf16) {
        m.grad_reduce_bytes += (b.numel + b.shard_numel) * 2;
        m.reduce_bytes += b.numel * 2;
      } else if (!aliased) {
        m.reduce_bytes += b.numel * int64_t(sizeof(float));
      }
      // Reference mode gathers the reduced fp32 gradients instead of parameters.
      if (!opt.distributed_optimizer && dp > 1) m.gather_bytes += b.numel * int64_t(sizeof(float));
    }
  }
  return m;
}

MemoryPlan DataParallel::allocated() const {
  MemoryPlan m;
  for (const auto& p : params_) m.params += p.numel();
  for (size_t f = 0; f < buf_.size(); ++f) {
    const BufferState& bs = buf_[f];
    m.laid_out += layout_.buffers[f].numel;
    m.master_bytes += int64_t(bs.master.size() * sizeof(float));
    m.adam_bytes += int64_t((bs.m.size() + bs.v.size()) * sizeof(float));
    m.main_grad_bytes += int64_t(bs.main_grad_own.size() * sizeof(float));
    m.grad_bytes += int64_t(bs.grad.size() * sizeof(float));
    m.grad_reduce_bytes += int64_t((bs.grad_bf16.size() + bs.shard_bf16.size()) * sizeof(uint16_t));
    m.payload_bytes += int64_t(bs.payload.size());
  }
  m.gather_bytes = last_step_gather_bytes_;
  m.reduce_bytes = last_step_reduce_bytes_;
  return m;
}

bool DataParallel::reused(int f) const {
  return opt_.payload_in_grad_buffer(layout_.buffers[f].format);
}

int64_t DataParallel::shard_local_off(int f, int b, int s) const {
  const Bucket& bk = layout_.buffers[f].buckets[b];
  return buf_[f].local_off[b] + (opt_.distributed_optimizer ? 0 : s * bk.shard_numel);
}

uint8_t* DataParallel::payload_ptr(int f, int b) {
  BufferState& bs = buf_[f];
  if (reused(f))  // the bucket's own grad region; 256-byte aligned by the layout
    return reinterpret_cast<uint8_t*>(bs.grad.data() + layout_.buffers[f].buckets[b].offset);
  return bs.payload.data() + bs.payload_off[b];
}

void DataParallel::for_each_owned_piece(const PieceFn& fn) {
  for (int f = 0; f < int(buf_.size()); ++f)
    for (int b = 0; b < int(buf_[f].st.size()); ++b)
      for (int s = 0; s < dp_; ++s) {
        if (!owns(s)) continue;
        const int64_t off = shard_local_off(f, b, s);
        for (const Piece& pc : layout_.buffers[f].buckets[b].shards[s]) fn(f, pc, off + pc.shard_pos);
      }
}

}  // namespace mxdp
