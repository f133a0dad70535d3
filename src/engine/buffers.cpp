// The engine's memory: what plan_memory predicts from the layout alone, what
// EngineBuffers allocates and measures, and where a bucket's pieces live in it.
#include "engine/buffers.h"

#include <algorithm>

#include "formats/format.h"
#include "formats/fp8_block.h"
#include "util/check.h"

namespace mxdp {

InPlaceCodes fp8_codes_in_place(const Bucket& b, int p, int64_t numel, bool payload_in_grad_buffer) {
  if (payload_in_grad_buffer) return {};
  for (int s = 0; s < int(b.shards.size()); ++s)
    for (const Piece& pc : b.shards[s])
      if (pc.param == p && pc.len > 0)  // its first piece is its whole, or a part
        return pc.len == numel ? InPlaceCodes{s, &pc} : InPlaceCodes{};
  return {};
}

int64_t fp8_store_bytes(int64_t rows, int64_t cols, bool codes_in_place) {
  const int64_t scales = fp8b128_gemm_scale_count(rows, cols) + fp8b128_gemm_scale_count(cols, rows);
  return (codes_in_place ? 1 : 2) * rows * cols + scales * int64_t(sizeof(float));
}

MemoryPlan plan_memory(const std::vector<ParamSpec>& params, const Layout& layout, const DpOptions& opt) {
  MemoryPlan m;
  const int dp = layout.dp;
  for (const auto& p : params) m.params += p.numel();
  for (const GatherBuffer& gb : layout.buffers) {
    for (const Bucket& b : gb.buckets)
      for (int p : b.params)
        if (opt.fp8_compute(gb.format, params[p].fp8_linear))
          m.fp8_weight_bytes +=
              fp8_store_bytes(params[p].shape[0], params[p].shape[1],
                              bool(fp8_codes_in_place(b, p, params[p].numel(), opt.payload_in_grad_buffer(gb.format))));
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
      const int64_t payload = dp * payload_shape(gb.format, b).shard_bytes;
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

EngineBuffers::EngineBuffers(const Layout& layout, const DpOptions& opt, EngineOps& ops, int rank, int dp,
                             const std::vector<ParamSpec>& params)
    : layout_(layout), opt_(opt), ops_(ops), rank_(rank), dp_(dp) {
  const int np = int(params.size());
  amax_slot_.assign(np, -1);
  buf_.resize(layout.buffers.size());
  for (size_t f = 0; f < buf_.size(); ++f) {
    const GatherBuffer& gb = layout.buffers[f];
    BufferState& bs = buf_[f];
    bs.grad = DeviceArray<float>(ops, gb.numel);
    int64_t local = 0, shard_total = 0, payload = 0;
    for (const Bucket& b : gb.buckets) {
      bs.local_off.push_back(local);
      local += opt.distributed_optimizer ? b.shard_numel : b.numel;
      bs.shard_off.push_back(shard_total);
      shard_total += b.shard_numel;
      bs.payload_off.push_back(payload);
      payload += dp * payload_shape(gb.format, b).shard_bytes;
    }
    if (opt.grad_reduce_dtype == GradReduceDType::Bf16) {
      bs.grad_bf16 = DeviceArray<uint16_t>(ops, gb.numel);
      bs.shard_bf16 = DeviceArray<uint16_t>(ops, shard_total);
    }
    if (!reused(int(f))) bs.payload = DeviceArray<uint8_t>(ops, payload);
    bs.master = DeviceArray<float>(ops, local);
    bs.m = DeviceArray<float>(ops, local);
    bs.v = DeviceArray<float>(ops, local);
    // dp 1: a shard is its whole bucket and the reduce-scatter a copy, so the
    // reduced grads may be the grad buffer itself (not where it holds payloads).
    bs.aliased = dp == 1 && !reused(int(f));
    if (bs.aliased) {
      MXDP_CHECK(local == gb.numel, "internal: dp 1 owns ", local, " of ", gb.numel, " elements");
      bs.main_grad = bs.grad.data();
    } else {
      bs.main_grad_own = DeviceArray<float>(ops, local);
      bs.main_grad = bs.main_grad_own.data();
    }
    if (format_traits(gb.format).tensor_amax) {
      int64_t slots = 0;
      for (const Bucket& b : gb.buckets) {
        bs.amax_off.push_back(slots);
        for (size_t i = 0; i < b.params.size(); ++i) amax_slot_[b.params[i]] = int(i);
        slots += int64_t(b.params.size());
      }
      bs.amax = DeviceArray<float>(ops, slots);
    }
  }
  fp8_.resize(np);
  for (int f = 0; f < size(); ++f) {
    const GatherBuffer& gb = layout.buffers[f];
    for (int b = 0; b < int(gb.buckets.size()); ++b)
      for (int p : gb.buckets[b].params)
        if (opt.fp8_compute(gb.format, params[p].fp8_linear)) make_fp8_store(f, b, p, params[p]);
  }
}

// W's codes point into the bucket's payload where fp8_codes_in_place says so
// (the payload is allocated by then), else into a copy of their own.
void EngineBuffers::make_fp8_store(int f, int b, int p, const ParamSpec& spec) {
  const GatherBuffer& gb = layout_.buffers[f];
  const Bucket& bk = gb.buckets[b];
  const int64_t r = spec.shape[0], c = spec.shape[1];
  Fp8Store& st = fp8_[p];
  if (const InPlaceCodes in = fp8_codes_in_place(bk, p, r * c, reused(f))) {
    st.codes = payload_ptr(f, b) + in.shard * payload_shape(gb.format, bk).shard_bytes +
               format_traits(gb.format).code_bytes(in.piece->shard_pos);
  } else {
    st.own_codes = DeviceArray<uint8_t>(ops_, r * c);
    st.codes = st.own_codes.data();
  }
  st.codes_t = DeviceArray<uint8_t>(ops_, r * c);
  st.gemm = DeviceArray<float>(ops_, fp8b128_gemm_scale_count(r, c));
  st.gemm_t = DeviceArray<float>(ops_, fp8b128_gemm_scale_count(c, r));
}

MemoryPlan EngineBuffers::allocated(const std::vector<ParamSpec>& params, int64_t gather_bytes,
                                    int64_t reduce_bytes) const {
  MemoryPlan m;
  for (const auto& p : params) m.params += p.numel();
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
  for (const Fp8Store& st : fp8_)
    m.fp8_weight_bytes += int64_t(st.own_codes.bytes() + st.codes_t.bytes() + st.gemm.bytes() + st.gemm_t.bytes());
  m.gather_bytes = gather_bytes;
  m.reduce_bytes = reduce_bytes;
  return m;
}

bool EngineBuffers::reused(int f) const { return opt_.payload_in_grad_buffer(layout_.buffers[f].format); }

int64_t EngineBuffers::shard_local_off(int f, int b, int s) const {
  const Bucket& bk = layout_.buffers[f].buckets[b];
  return buf_[f].local_off[b] + (opt_.distributed_optimizer ? 0 : s * bk.shard_numel);
}

uint8_t* EngineBuffers::payload_ptr(int f, int b) {
  BufferState& bs = buf_[f];
  if (reused(f))  // the bucket's own grad region; 256-byte aligned by the layout
    return reinterpret_cast<uint8_t*>(bs.grad.data() + layout_.buffers[f].buckets[b].offset);
  return bs.payload.data() + bs.payload_off[b];
}

float* EngineBuffers::param_amax(int p) {
  const ParamPlace& pl = layout_.place[p];
  return buf_[pl.buffer].amax.data() + buf_[pl.buffer].amax_off[pl.bucket] + amax_slot_[p];
}

Fp8Store& EngineBuffers::fp8(int p) {
  MXDP_CHECK(p >= 0 && p < int(fp8_.size()) && fp8_[p].codes, "param ", p,
             " has no FP8 weight: only the fp8_linear params in fp8b128 with compute_dtype fp8 have one");
  return fp8_[p];
}

void EngineBuffers::for_each_owned_piece(const PieceFn& fn) {
  for (int f = 0; f < size(); ++f)
    for (int b = 0; b < int(layout_.buffers[f].buckets.size()); ++b)
      for (int s = 0; s < dp_; ++s) {
        if (!owns(s)) continue;
        const int64_t off = shard_local_off(f, b, s);
        for (const Piece& pc : layout_.buffers[f].buckets[b].shards[s]) fn(f, pc, off + pc.shard_pos);
      }
}

void EngineBuffers::for_each_shard_piece(int s, const PieceFn& fn) {
  for (int f = 0; f < size(); ++f)
    for (int b = 0; b < int(layout_.buffers[f].buckets.size()); ++b) {
      const int64_t off = shard_local_off(f, b, s);
      for (const Piece& pc : layout_.buffers[f].buckets[b].shards[s])
        if (pc.len > 0) fn(f, pc, off + pc.shard_pos);
    }
}

void EngineBuffers::zero_state() {
  for (BufferState& bs : buf_)
    for (auto* a : {&bs.master, &bs.m, &bs.v}) ops_.zero(a->data(), a->bytes());
}

}  // namespace mxdp
