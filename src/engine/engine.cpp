#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "util/check.h"
#include "io/checkpoint.h"
#include "formats/codec.h"
#include "engine/optimizer.h"
#include "formats/quant.h"

// Fault switches exist only in the test library (faults.h); in the product
// build every MXDP_FAULT(...) is the constant false and no fault code remains.
#ifdef MXDP_FAULTS
#include "engine/faults.h"
#define MXDP_FAULT(name) (::mxdp::faults::active().name)
#define MXDP_FAULT_FIRED() (void)(++::mxdp::faults::fired())
#else
#define MXDP_FAULT(name) false
#define MXDP_FAULT_FIRED() (void)0
#endif

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

DataParallel::DataParallel(Model& model, Communicator& comm, const DpOptions& opt, EngineOps* ops)
    : model_(model),
      comm_(comm),
      own_ops_(ops ? nullptr : make_cpu_ops()),
      ops_(ops ? ops : own_ops_.get()),
      opt_(opt),
      rank_(comm.rank()),
      dp_(comm.size()) {
  opt_.validate(dp_);
  MXDP_CHECK(ops_->device_memory() == comm.device_memory(), "the engine's ops work on ",
             ops_->device_memory() ? "device" : "host", " memory but the communicator on ",
             comm.device_memory() ? "device" : "host", " memory");
  params_ = model.params();
  MXDP_CHECK(!params_.empty(), "the model has no parameters");
  const int np = int(params_.size());
  const int nl = model.num_layers();
  layer_params_.assign(nl, {});
  for (int p = 0; p < np; ++p) {
    MXDP_CHECK(params_[p].layer >= 0 && params_[p].layer < nl, "param '", params_[p].name,
               "' names layer ", params_[p].layer, " but the model has ", nl, " layers");
    layer_params_[params_[p].layer].push_back(p);
  }
  layout_ = Layout::build(params_, opt_.weight_format, opt_.bucket_size, dp_, opt_.layout_order);
  fwd_order_ = layout_.forward_order();
  amax_slot_.assign(np, -1);

  buf_.resize(layout_.buffers.size());
  for (size_t f = 0; f < buf_.size(); ++f) {
    const GatherBuffer& gb = layout_.buffers[f];
    BufferState& bs = buf_[f];
    bs.grad = DeviceArray<float>(*ops_, gb.numel);
    bs.st.resize(gb.buckets.size());
    bs.unpack.resize(gb.buckets.size());
    int64_t local = 0, shard_total = 0, payload = 0;
    for (const Bucket& b : gb.buckets) {
      bs.local_off.push_back(local);
      local += opt_.distributed_optimizer ? b.shard_numel : b.numel;
      bs.shard_off.push_back(shard_total);
      shard_total += b.shard_numel;
      bs.payload_off.push_back(payload);
      payload += dp_ * payload_shape(gb.format, b.shard_numel).shard_bytes;
    }
    if (opt_.grad_reduce_dtype == GradReduceDType::Bf16) {
      bs.grad_bf16 = DeviceArray<uint16_t>(*ops_, gb.numel);
      bs.shard_bf16 = DeviceArray<uint16_t>(*ops_, shard_total);
    }
    if (!reused(int(f))) bs.payload = DeviceArray<uint8_t>(*ops_, payload);
    bs.master = DeviceArray<float>(*ops_, local);
    bs.m = DeviceArray<float>(*ops_, local);
    bs.v = DeviceArray<float>(*ops_, local);
    // dp 1: a shard is its whole bucket and the reduce-scatter a copy, so the
    // reduced grads may be the grad buffer itself (not where it holds payloads).
    bs.aliased = dp_ == 1 && !reused(int(f));
    if (bs.aliased) {
      MXDP_CHECK(local == gb.numel, "internal: dp 1 owns ", local, " of ", gb.numel, " elements");
      bs.main_grad = bs.grad.data();
    } else {
      bs.main_grad_own = DeviceArray<float>(*ops_, local);
      bs.main_grad = bs.main_grad_own.data();
    }
    if (gb.format == WeightFormat::Nvfp4) {
      int64_t slots = 0;
      for (const Bucket& b : gb.buckets) {
        bs.amax_off.push_back(slots);
        for (size_t i = 0; i < b.params.size(); ++i) amax_slot_[b.params[i]] = int(i);
        slots += int64_t(b.params.size());
      }
      bs.amax = DeviceArray<float>(*ops_, slots);
    }
  }
  norm_partials_ = DeviceArray<double>(*ops_, size_t(dp_) * norm_row());
  micro_losses_ = DeviceArray<float>(*ops_, size_t(opt_.micro_batches));
  ctl_ = DeviceArray<StepControl>(*ops_, 1);
  for (HostArray<uint8_t>& h : host_slots_)
    h = HostArray<uint8_t>(*ops_, norm_partials_.bytes() + sizeof(StepControl) + micro_losses_.bytes());
  // The model's initial weights become the masters of the shards this rank owns.
  for_each_owned_piece([&](int f, const Piece& pc, int64_t at) {
    ops_->copy(buf_[f].master.data() + at, model_.initial_weights(pc.param) + pc.param_begin, pc.len * sizeof(float));
  });
  model_.release_initial_weights();
}

template <class Fn>
void DataParallel::for_each_owned_piece(Fn&& fn) {
  for (int f = 0; f < int(buf_.size()); ++f)
    for (int b = 0; b < int(buf_[f].st.size()); ++b)
      for (int s = 0; s < dp_; ++s) {
        if (!owns(s)) continue;
        const int64_t off = shard_local_off(f, b, s);
        for (const Piece& pc : layout_.buffers[f].buckets[b].shards[s]) fn(f, pc, off + pc.shard_pos);
      }
}

DataParallel::~DataParallel() {
  try {
    drop_inflight();
  } catch (...) {
  }
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

// ---------------------------------------------------------------- the chain

const float* DataParallel::param_amax(int p) const {
  const ParamPlace& pl = layout_.place[p];
  return buf_[pl.buffer].amax.data() + buf_[pl.buffer].amax_off[pl.bucket] + amax_slot_[p];
}

// Quantizes the shards this rank owns into the bucket's payload. With `u` (the
// optimizer step) AdamW runs first, in the same pass over memory: the fused ops
// read g, m, v and the master once and write m, v, the master and the payload.
// Every element gets exactly the bits of adamw() then quantize() (engine_ops.h).
void DataParallel::stage(int f, int b, const Update* u) {
  const GatherBuffer& gb = layout_.buffers[f];
  const Bucket& bk = gb.buckets[b];
  BufferState& bs = buf_[f];
  BucketState& st = bs.st[b];
  if (reused(f))
    MXDP_CHECK(st.region != Region::Grads, "staging bucket ", b, " of the ", to_string(gb.format),
               " buffer into its grad region, which still holds live gradients");
  const PayloadShape ps = payload_shape(gb.format, bk.shard_numel);
  uint8_t* base = payload_ptr(f, b);
  const auto adamw_params = [&](int param) {
    return adamw_choice(AdamWParams{u->lr, float(opt_.adam_beta1), float(opt_.adam_beta2), float(opt_.adam_eps),
                                    params_[param].decay ? float(opt_.weight_decay) : 0.0f, u->first_t});
  };

  if (gb.format == WeightFormat::Nvfp4) {
    // One tensor scale per param: the max over every shard's amax of the
    // (updated) master, so each rank quantizes its piece exactly as a rank holding
    // the whole tensor would. Pass 1 (fused with AdamW) folds each piece's amax
    // into its param's slot in device memory, the slots are all-reduced on the
    // device, and pass 2 quantizes reading them there: no host round trip.
    float* am = bs.amax.data() + bs.amax_off[b];
    ops_->zero(am, bk.params.size() * sizeof(float));
    const auto pass1 = [&](const Piece& pc, int64_t off) {
      const int64_t at = off + pc.shard_pos;
      float* slot = am + amax_slot_[pc.param];
      if (u)
        ops_->adamw_amax(bs.master.data() + at, bs.m.data() + at, bs.v.data() + at, bs.main_grad + at, pc.len,
                         ctl_.data(), adamw_params(pc.param), slot);
      else
        ops_->amax_into(bs.master.data() + at, pc.len, slot);
    };
    // dp 1: each param of the bucket is one piece of its one shard, so its amax
    // is complete after its own pass 1, and pass 2 follows right away (reading
    // masters just written, from L2 when the param fits there).
    const bool per_piece = dp_ == 1;
    if (!per_piece) {
      for (int s = 0; s < dp_; ++s) {
        if (!owns(s)) continue;
        for (const Piece& pc : bk.shards[s])
          if (pc.len > 0) pass1(pc, shard_local_off(f, b, s));
      }
      if (opt_.distributed_optimizer && dp_ > 1)
        comm_.all_reduce(am, am, bk.params.size(), DType::F32, RedOp::Max, ops_->stream());
    }
    for (int s = 0; s < dp_; ++s) {
      if (!owns(s)) continue;
      const int64_t off = shard_local_off(f, b, s);
      const float* x = bs.master.data() + off;
      uint8_t* slot = base + s * ps.shard_bytes;
      // Segments of the shard, each piece with its param's tensor amax, the
      // padding between them as zeros (amax 0).
      auto pad = [&](int64_t at, int64_t len) {
        if (len > 0)
          ops_->quantize(WeightFormat::Nvfp4, opt_.mxfp8_scale_rounding, x + at, len, 0.0f, slot + at / 2,
                         slot + ps.code_bytes + at / kNvfp4Block);
      };
      int64_t pos = 0;
      for (const Piece& pc : bk.shards[s]) {
        pad(pos, pc.shard_pos - pos);
        if (pc.len > 0) {
          if (per_piece) pass1(pc, off);
          ops_->quantize_nvfp4(x + pc.shard_pos, pc.len, am + amax_slot_[pc.param], slot + pc.shard_pos / 2,
                               slot + ps.code_bytes + pc.shard_pos / kNvfp4Block);
        }
        pos = pc.shard_pos + pc.len;
      }
      pad(pos, bk.shard_numel - pos);
    }
  } else {
    for (int s = 0; s < dp_; ++s) {
      if (!owns(s)) continue;
      const int64_t off = shard_local_off(f, b, s);
      uint8_t* slot = base + s * ps.shard_bytes;
      if (!u) {
        ops_->quantize(gb.format, opt_.mxfp8_scale_rounding, bs.master.data() + off, bk.shard_numel, 0.0f, slot,
                       slot + ps.code_bytes);
        continue;
      }
      // The whole shard in as few passes as its params' weight decay allows:
      // consecutive pieces with the same decay are one range, the padding
      // around them included (its grads, moments and masters are zero and stay
      // zero under AdamW with any decay). Ranges start at piece starts, which
      // are whole MXFP8 blocks, so the blocks are those of the whole shard.
      const auto fused = [&](int64_t at, int64_t len, int param) {
        if (len <= 0) return;
        const int64_t e = off + at;
        const int64_t code_at = gb.format == WeightFormat::Bf16 ? 2 * at : at;
        ops_->adamw_quantize(gb.format, opt_.mxfp8_scale_rounding, bs.master.data() + e, bs.m.data() + e,
                             bs.v.data() + e, bs.main_grad + e, len, ctl_.data(), adamw_params(param),
                             slot + code_at, slot + ps.code_bytes + at / kMxfp8Block);
      };
      const std::vector<Piece>& pcs = bk.shards[s];
      int64_t begin = 0;
      int run_param = pcs.empty() ? bk.params.front() : pcs.front().param;
      for (const Piece& pc : pcs) {
        if (params_[pc.param].decay == params_[run_param].decay) continue;
        MXDP_CHECK(gb.format != WeightFormat::Mxfp8 || pc.shard_pos % kMxfp8Block == 0, "internal: piece of '",
                   params_[pc.param].name, "' starts inside an MXFP8 block (", pc.shard_pos, ")");
        fused(begin, pc.shard_pos - begin, run_param);
        begin = pc.shard_pos;
        run_param = pc.param;
      }
      fused(begin, bk.shard_numel - begin, run_param);
    }
  }
  st.staged_v = version_;
  if (reused(f)) st.region = Region::Payload;
  // Reference mode: every rank staged every shard; there is nothing to gather.
  if (!opt_.distributed_optimizer) st.gathered_v = st.staged_v;
}

void DataParallel::start_gather(int f, int b) {
  BucketState& st = buf_[f].st[b];
  if (st.weights_v >= version_ || st.gathered_v >= version_) return;  // nothing newer to move
  if (st.gather) {
    // One gather per bucket in flight. A record that was waited for but kept
    // (only under the deferred-reset fault) wrongly stops a new dispatch here.
    if (st.gather_done) MXDP_FAULT_FIRED();
    return;
  }
  if (st.staged_v < version_) {
    if (MXDP_FAULT(skip_stage_before_forced_gather)) {
      MXDP_FAULT_FIRED();
      st.staged_v = version_;
    } else {
      stage(f, b);
    }
  }
  if (!opt_.distributed_optimizer) return;
  const PayloadShape ps = payload_shape(layout_.buffers[f].format, layout_.buffers[f].buckets[b].shard_numel);
  uint8_t* base = payload_ptr(f, b);
  st.gather = comm_.all_gather_async(base + rank_ * ps.shard_bytes, base, ps.shard_bytes, ops_->stream());
  gather_bytes_ += dp_ * ps.shard_bytes;
  st.gather_v = st.staged_v;
  st.gather_done = false;
}

void DataParallel::finish_gather(int f, int b) {
  BucketState& st = buf_[f].st[b];
  if (!st.gather) return;
  if (!st.gather_done) st.gather->wait();
  st.gathered_v = st.gather_v;  // a record kept by the fault carries its old version
  if (in_eval_ && MXDP_FAULT(skip_deferred_reset_after_eval))
    st.gather_done = true;  // the bug: the consumed gather stays recorded as pending
  else
    st.gather.reset();
}

void DataParallel::unpack(int f, int b) {
  const GatherBuffer& gb = layout_.buffers[f];
  const Bucket& bk = gb.buckets[b];
  if (reused(f))
    MXDP_CHECK(buf_[f].st[b].region == Region::Payload, "unpacking bucket ", b,
               " from its grad region, which does not hold a gathered payload");
  // Every piece of every shard in one dequantize_pieces launch. The table of
  // pointers stays in ops memory and is uploaded again only if it changed
  // (compute weights are fixed for a model's life, so: once per bucket).
  const PayloadShape ps = payload_shape(gb.format, bk.shard_numel);
  const uint8_t* base = payload_ptr(f, b);
  const ComputeDType dt = model_.compute_dtype();
  const int64_t esize = dt == ComputeDType::F32 ? 4 : 2;
  std::vector<UnpackPiece> t;
  int64_t max_len = 0;
  for (int s = 0; s < dp_; ++s) {
    const uint8_t* slot = base + s * ps.shard_bytes;
    for (const Piece& pc : bk.shards[s]) {
      if (pc.len <= 0) continue;
      UnpackPiece u;
      u.dst = static_cast<uint8_t*>(model_.compute_weights(pc.param)) + pc.param_begin * esize;
      u.len = pc.len;
      const int64_t at = pc.shard_pos;
      switch (gb.format) {
        case WeightFormat::Bf16: u.codes = slot + 2 * at; break;
        case WeightFormat::Mxfp8:
          u.codes = slot + at;
          u.scales = slot + ps.code_bytes + at / kMxfp8Block;
          break;
        case WeightFormat::Nvfp4:
          u.codes = slot + at / 2;
          u.scales = slot + ps.code_bytes + at / kNvfp4Block;
          u.amax = param_amax(pc.param);
          break;
      }
      max_len = std::max(max_len, pc.len);
      t.push_back(u);
    }
  }
  UnpackTable& ut = buf_[f].unpack[b];
  if (t.size() != ut.host.size() || std::memcmp(t.data(), ut.host.data(), t.size() * sizeof(UnpackPiece)) != 0) {
    ut.dev = DeviceArray<UnpackPiece>(*ops_, t.size());
    ops_->copy_from_host(ut.dev.data(), t.data(), t.size() * sizeof(UnpackPiece));
    ut.host = std::move(t);
    ut.max_len = max_len;
  }
  ops_->dequantize_pieces(gb.format, ut.dev.data(), int(ut.host.size()), ut.max_len, dt);
}

void DataParallel::weights_for_forward(int f, int b) {
  BucketState& st = buf_[f].st[b];
  if (st.weights_v == version_) return;
  if (st.gathered_v < version_) {
    start_gather(f, b);
    finish_gather(f, b);
  }
  if (st.weights_v < st.gathered_v) {
    if (MXDP_FAULT(skip_unpack))
      MXDP_FAULT_FIRED();
    else
      unpack(f, b);
    st.weights_v = st.gathered_v;
  }
  MXDP_CHECK(st.weights_v == version_, "stale weights: bucket ", b, " of the ",
             to_string(layout_.buffers[f].format), " buffer holds version ", st.weights_v,
             " but the latest optimizer step made version ", version_);
}

void DataParallel::check_fresh(int p) const {
  const ParamPlace& pl = layout_.place[p];
  const BucketState& st = buf_[pl.buffer].st[pl.bucket];
  MXDP_CHECK(st.weights_v == version_, "stale weights: layer ", params_[p].layer, " is about to read '",
             params_[p].name, "' at version ", st.weights_v, ", but the latest optimizer step made version ",
             version_);
}

void DataParallel::before_layer(int layer) {
  MXDP_CHECK(layer >= 0 && layer < int(layer_params_.size()), "before_layer(", layer,
             "): the model has ", layer_params_.size(), " layers");
  while (cursor_ < fwd_order_.size()) {
    auto [f, b] = fwd_order_[cursor_];
    if (layout_.buffers[f].buckets[b].first_layer > layer) break;
    ++cursor_;
    weights_for_forward(f, b);
    if (opt_.overlap_param_gather && cursor_ < fwd_order_.size())
      start_gather(fwd_order_[cursor_].first, fwd_order_[cursor_].second);  // prefetch the next
  }
  for (int p : layer_params_[layer]) check_fresh(p);
}

// ---------------------------------------------------------------- gradients

float* DataParallel::grad(int p) {
  MXDP_CHECK(in_backward_, "grad(", p, ") asked outside backward");
  MXDP_CHECK(p >= 0 && p < int(params_.size()), "grad(", p, "): no such param");
  const ParamPlace& pl = layout_.place[p];
  return buf_[pl.buffer].grad.data() + pl.offset;
}

void DataParallel::begin_backward() {
  for (size_t f = 0; f < buf_.size(); ++f)
    for (size_t b = 0; b < buf_[f].st.size(); ++b) {
      BucketState& st = buf_[f].st[b];
      // Grad-buffer reuse: the region may hold the gathered payload; only once
      // the weights are unpacked from it may backward overwrite it.
      MXDP_CHECK(st.weights_v == version_, "backward would overwrite bucket ", b,
                 " whose weights (version ", st.weights_v, ") were never unpacked for version ", version_);
      MXDP_CHECK(!st.reducing, "bucket ", b, " still has a reduce-scatter in flight");
      const Bucket& bk = layout_.buffers[f].buckets[b];
      ops_->zero(buf_[f].grad.data() + bk.offset, bk.numel * sizeof(float));
      if (reused(int(f))) {
        st.region = Region::Grads;
        st.staged_v = -1;  // rank r's staged slice is gone with the zeroing
        st.gathered_v = -1;
      }
    }
}

void DataParallel::after_layer_backward(int layer) {
  MXDP_CHECK(in_backward_, "after_layer_backward(", layer, ") outside backward");
  const bool last = micro_ == opt_.micro_batches - 1;
  for (int p : layer_params_[layer]) {
    const ParamPlace& pl = layout_.place[p];
    BucketState& st = buf_[pl.buffer].st[pl.bucket];
    MXDP_CHECK(st.grads_pending > 0, "gradient of '", params_[p].name, "' completed twice");
    if (--st.grads_pending == 0 && last && opt_.overlap_grad_reduce) start_reduce(pl.buffer, pl.bucket);
  }
  // MPI makes progress on outstanding collectives only inside MPI calls.
  for (auto& bs : buf_)
    for (auto& st : bs.st)
      if (st.reduce) st.reduce->test();
}

void DataParallel::start_reduce(int f, int b) {
  const Bucket& bk = layout_.buffers[f].buckets[b];
  BufferState& bs = buf_[f];
  BucketState& st = bs.st[b];
  MXDP_CHECK(!st.reducing, "bucket ", b, " reduce-scatter started twice");
  st.reducing = true;
  float* g = bs.grad.data() + bk.offset;
  float* out = bs.main_grad + shard_local_off(f, b, rank_);
  // One rank, fp32, main grads aliasing the grad buffer: the reduce-scatter
  // would copy the bucket onto itself. Nothing to do.
  if (bs.aliased && opt_.grad_reduce_dtype == GradReduceDType::Fp32) return;
  reduce_bytes_ += bk.numel * (opt_.grad_reduce_dtype == GradReduceDType::Fp32 ? 4 : 2);
  if (opt_.grad_reduce_dtype == GradReduceDType::Fp32) {
    st.reduce = comm_.reduce_scatter_async(g, out, bk.shard_numel, DType::F32, RedOp::Avg, ops_->stream());
  } else {
    uint16_t* g16 = bs.grad_bf16.data() + bk.offset;
    ops_->to_bf16(g, g16, bk.numel);
    st.reduce = comm_.reduce_scatter_async(g16, bs.shard_bf16.data() + bs.shard_off[b], bk.shard_numel,
                                           DType::BF16, RedOp::Avg, ops_->stream());
  }
}

void DataParallel::finish_reduce(int f, int b) {
  const Bucket& bk = layout_.buffers[f].buckets[b];
  BufferState& bs = buf_[f];
  BucketState& st = bs.st[b];
  MXDP_CHECK(st.reducing, "bucket ", b, " has no reduce-scatter to finish");
  st.reducing = false;
  if (st.reduce) st.reduce->wait();
  st.reduce.reset();
  float* out = bs.main_grad + shard_local_off(f, b, rank_);
  if (opt_.grad_reduce_dtype == GradReduceDType::Bf16) {
    // (aliased: the grad buffer, whose grads the bf16 copy already took)
    ops_->from_bf16(bs.shard_bf16.data() + bs.shard_off[b], out, bk.shard_numel);
  }
  // Reference mode: every rank needs the whole reduced gradient.
  if (!opt_.distributed_optimizer && dp_ > 1) {
    comm_.all_gather(out, bs.main_grad + bs.local_off[b], bk.shard_numel * sizeof(float), ops_->stream());
    gather_bytes_ += bk.numel * int64_t(sizeof(float));
  }
  if (reused(f)) st.region = Region::Idle;  // grads consumed: the region may take a payload
}

// ---------------------------------------------------------------- steps

void DataParallel::forward_backward(const Batch& batch) {
  MXDP_CHECK(micro_ < opt_.micro_batches, "forward_backward: ", micro_,
             " micro-batches already accumulated; call optimizer_step() first");
  cursor_ = 0;
  model_.forward_into(batch, *this, micro_losses_.data() + micro_);
  if (micro_ == 0) begin_backward();
  for (size_t f = 0; f < buf_.size(); ++f)
    for (size_t b = 0; b < buf_[f].st.size(); ++b)
      buf_[f].st[b].grads_pending = int(layout_.buffers[f].buckets[b].params.size());
  in_backward_ = true;
  try {
    model_.backward(*this);
  } catch (...) {
    in_backward_ = false;
    throw;
  }
  in_backward_ = false;
  for (size_t f = 0; f < buf_.size(); ++f)
    for (size_t b = 0; b < buf_[f].st.size(); ++b)
      MXDP_CHECK(buf_[f].st[b].grads_pending == 0, "backward ended but bucket ", b, " has ",
                 buf_[f].st[b].grads_pending, " params whose after_layer_backward never came");
  if (micro_ == opt_.micro_batches - 1 && !opt_.overlap_grad_reduce)
    for (size_t f = 0; f < buf_.size(); ++f)
      for (size_t b = 0; b < buf_[f].st.size(); ++b) start_reduce(int(f), int(b));
  ++micro_;
}

void DataParallel::launch_step() {
  MXDP_CHECK(micro_ == opt_.micro_batches, "optimizer step after ", micro_, " of ",
             opt_.micro_batches, " micro-batches");
  decide_step();
  // The host may not know yet whether the steps before were skipped: at most
  // kMaxStepsInFlight - 1 of them stay unread, so the AdamW count is one of
  // the kMaxStepsInFlight the update carries scalars for.
  for (Launched& l : launched_) {  // oldest first; resolve() passes over those already read
    if (unresolved() < kMaxStepsInFlight) break;
    resolve(l);
  }
  Launched l;
  l.r.lr = lr_at(iteration_, opt_.lr, opt_.min_lr, opt_.warmup_steps, opt_.lr_decay_steps);
  l.r.iteration = ++iteration_;
  ++version_;
  micro_ = 0;
  apply_step(Update{float(l.r.lr), updates_ + 1});
  close_traffic_window();
  send_results(l);
  launched_.push_back(std::move(l));
}

int DataParallel::norm_row() const {
  int nb = 0;
  for (const GatherBuffer& gb : layout_.buffers) nb += int(gb.buckets.size());
  return nb + 1;
}

void DataParallel::decide_step() {
  for (size_t f = 0; f < buf_.size(); ++f)
    for (size_t b = 0; b < buf_[f].st.size(); ++b) finish_reduce(int(f), int(b));

  // Averaged over ranks by the reduce-scatter; over micro-batches here.
  if (opt_.micro_batches > 1) {
    const float inv = float(1.0 / opt_.micro_batches);
    for (auto& bs : buf_) ops_->scale(bs.main_grad, int64_t(bs.master.size()), inv);
  }

  // Global grad norm from per-(bucket, shard) partial sums, added in a fixed
  // order (bucket, then shard) on every rank and in both modes. The sums stay
  // in ops memory, [shard][bucket] with each row's last column this rank's loss
  // sum; dp > 1: one all-gather of each rank's row (in reference mode the rows
  // of other shards it brings are the same values this rank computed: every rank
  // holds the same reduced grads). step_control turns them into the step's
  // scalars on the device; nothing here waits for them.
  const int row = norm_row(), nb = row - 1;
  double* dpart = norm_partials_.data();
  int gi = 0;
  for (size_t f = 0; f < buf_.size(); ++f)
    for (size_t b = 0; b < buf_[f].st.size(); ++b, ++gi)
      for (int s = 0; s < dp_; ++s)
        if (owns(s))
          ops_->sum_squares_into(buf_[f].main_grad + shard_local_off(int(f), int(b), s),
                                 layout_.buffers[f].buckets[b].shard_numel, dpart + size_t(s) * row + gi);
  ops_->sum_into(micro_losses_.data(), opt_.micro_batches, dpart + size_t(rank_) * row + nb);
  if (dp_ > 1) comm_.all_gather(dpart + size_t(rank_) * row, dpart, row * sizeof(double), ops_->stream());
  ops_->step_control(dpart, dp_, row, nb, opt_.clip_grad, ctl_.data());
}

void DataParallel::apply_step(const Update& u) {
  // AdamW and stage, fused, bucket by bucket (a skipped step restages the same
  // masters); then gather now, or (overlap) dispatch only the first bucket the
  // next forward needs and defer the rest to the forward itself.
  for (auto [f, b] : fwd_order_) stage(f, b, &u);
  if (!opt_.overlap_param_gather) {
    for (auto [f, b] : fwd_order_) start_gather(f, b);
    for (auto [f, b] : fwd_order_) {
      finish_gather(f, b);
      MXDP_CHECK(buf_[f].st[b].gathered_v == version_, "stale gather: bucket ", b, " of the ",
                 to_string(layout_.buffers[f].format), " buffer gathered version ",
                 buf_[f].st[b].gathered_v, " right after the step that made version ", version_);
    }
  } else if (!fwd_order_.empty()) {
    start_gather(fwd_order_[0].first, fwd_order_[0].second);
  }
}

// The step's partial sums, control and micro-batch losses travel to the host
// behind its work, into the step's pinned slot; resolve() reads them.
void DataParallel::send_results(Launched& l) {
  l.slot = next_slot_;
  next_slot_ = (next_slot_ + 1) % kMaxStepsInFlight;
  uint8_t* h = host_slots_[l.slot].data();
  ops_->copy_to_host_async(h, norm_partials_.data(), norm_partials_.bytes());
  ops_->copy_to_host_async(h + norm_partials_.bytes(), ctl_.data(), sizeof(StepControl));
  ops_->copy_to_host_async(h + norm_partials_.bytes() + sizeof(StepControl), micro_losses_.data(),
                           micro_losses_.bytes());
  l.mark = ops_->mark();
}

int DataParallel::unresolved() const {
  int n = 0;
  for (const Launched& l : launched_) n += l.resolved ? 0 : 1;
  return n;
}

void DataParallel::resolve(Launched& l) {
  if (l.resolved) return;
  ops_->wait(l.mark);
  const uint8_t* h = host_slots_[l.slot].data();
  const int row = norm_row(), nb = row - 1;
  std::vector<double> partial(size_t(dp_) * row);
  StepControl c;
  std::vector<float> losses(size_t(opt_.micro_batches));
  std::memcpy(partial.data(), h, partial.size() * sizeof(double));
  std::memcpy(&c, h + norm_partials_.bytes(), sizeof c);
  std::memcpy(losses.data(), h + norm_partials_.bytes() + sizeof c, losses.size() * sizeof(float));
  // Mean loss over micro-batches and ranks, added in rank order.
  double sum = 0;
  for (int q = 0; q < dp_; ++q) sum += partial[size_t(q) * row + nb];
  l.r.loss = sum / (double(dp_) * opt_.micro_batches);
  l.r.micro_losses.assign(losses.begin(), losses.end());
  l.r.grad_norm = c.grad_norm;
  l.r.skipped = c.skip != 0;
  MXDP_CHECK(c.updates == updates_ + (l.r.skipped ? 0 : 1), "internal: step ", l.r.iteration,
             " read back AdamW count ", c.updates, " after ", updates_, " (skipped: ", l.r.skipped, ")");
  updates_ = c.updates;
  l.r.version = updates_;
  if (l.r.skipped) ++skipped_steps_;  // weights untouched: the masters are those of the step before
  l.resolved = true;
}

void DataParallel::resolve_all() {
  for (Launched& l : launched_) resolve(l);
}

std::optional<StepResult> DataParallel::take_result(bool wait) {
  if (launched_.empty()) return std::nullopt;
  Launched& l = launched_.front();
  if (!l.resolved) {
    if (!wait) return std::nullopt;
    resolve(l);
  }
  StepResult r = std::move(l.r);
  launched_.pop_front();
  return r;
}

StepResult DataParallel::optimizer_step() {
  launch_step();
  StepResult r;
  while (auto x = take_result(true)) r = std::move(*x);
  return r;
}

int64_t DataParallel::version() {
  resolve_all();
  return updates_;
}

int64_t DataParallel::skipped_steps() {
  resolve_all();
  return skipped_steps_;
}

void DataParallel::set_loaded_counts(int64_t updates, int64_t iteration) {
  resolve_all();  // results of steps before the load stay takeable
  StepControl c;
  c.updates = updates;
  ops_->copy_from_host(ctl_.data(), &c, sizeof c);
  version_ = updates_ = updates;
  iteration_ = iteration;
}

void DataParallel::close_traffic_window() {
  last_step_gather_bytes_ = gather_bytes_;
  last_step_reduce_bytes_ = reduce_bytes_;
  gather_bytes_ = reduce_bytes_ = 0;
}

StepResult DataParallel::train_step(const std::vector<Batch>& micro_batches) {
  MXDP_CHECK(int(micro_batches.size()) == opt_.micro_batches, "train_step got ",
             micro_batches.size(), " micro-batches, options say micro_batches = ", opt_.micro_batches);
  for (const Batch& b : micro_batches) forward_backward(b);
  return optimizer_step();
}

void DataParallel::sync_weights() {
  for (auto [f, b] : fwd_order_) weights_for_forward(f, b);
}

double DataParallel::eval(const std::vector<Batch>& batches) {
  MXDP_CHECK(!batches.empty(), "eval needs at least one batch");
  // Each batch's loss stays in ops memory until the last is done: one read.
  DeviceArray<float> dev(*ops_, batches.size());
  in_eval_ = true;
  try {
    for (size_t i = 0; i < batches.size(); ++i) {
      cursor_ = 0;
      model_.forward_into(batches[i], *this, dev.data() + i);
    }
  } catch (...) {
    in_eval_ = false;
    throw;
  }
  in_eval_ = false;
  std::vector<float> host(batches.size());
  ops_->copy_to_host(host.data(), dev.data(), dev.bytes());
  double sum = 0;
  for (float l : host) sum += l;
  std::vector<double> losses(dp_);
  losses[rank_] = sum / double(batches.size());
  host_all_gather(losses.data(), sizeof(double));
  double total = 0;
  for (double l : losses) total += l;
  return total / dp_;
}

// ---------------------------------------------------------------- checkpoints

void DataParallel::drop_inflight() {
  for (auto& bs : buf_)
    for (auto& st : bs.st) {
      if (st.gather && !st.gather_done) st.gather->wait();
      st.gather.reset();
      if (st.reduce) st.reduce->wait();
      st.reduce.reset();
      st.reducing = false;
    }
}

std::vector<float> DataParallel::full_bucket(const DeviceArray<float>& local, int f, int b) {
  const Bucket& bk = layout_.buffers[f].buckets[b];
  DeviceArray<float> full(*ops_, bk.numel);
  const float* mine = local.data() + buf_[f].local_off[b];
  if (!opt_.distributed_optimizer) {
    ops_->copy(full.data(), mine, bk.numel * sizeof(float));
  } else {
    float* slot = full.data() + rank_ * bk.shard_numel;
    ops_->copy(slot, mine, bk.shard_numel * sizeof(float));
    comm_.all_gather(slot, full.data(), bk.shard_numel * sizeof(float), ops_->stream());
  }
  std::vector<float> host(bk.numel);
  ops_->copy_to_host(host.data(), full.data(), full.bytes());
  return host;
}

void DataParallel::host_all_gather(void* host, size_t b) {
  uint8_t* h = static_cast<uint8_t*>(host);
  if (dp_ == 1) return;  // this rank's slot is the whole result: no device round trip
  if (!comm_.device_memory()) {
    comm_.all_gather(h + rank_ * b, h, b);
    return;
  }
  DeviceArray<uint8_t> d(*ops_, dp_ * b);
  ops_->copy_from_host(d.data() + rank_ * b, h + rank_ * b, b);
  comm_.all_gather(d.data() + rank_ * b, d.data(), b, ops_->stream());
  ops_->copy_to_host(h, d.data(), d.bytes());
}

void broadcast_host_bytes(Communicator& comm, EngineOps& ops, void* host, size_t bytes, int root) {
  if (!comm.device_memory()) {
    comm.broadcast(host, bytes, root);
    return;
  }
  DeviceArray<uint8_t> d(ops, bytes);
  ops.copy_from_host(d.data(), host, bytes);
  comm.broadcast(d.data(), bytes, root, ops.stream());
  ops.copy_to_host(host, d.data(), bytes);
}

void DataParallel::host_broadcast(void* host, size_t bytes, int root) {
  if (dp_ == 1) return;
  if (!comm_.device_memory()) {
    comm_.broadcast(host, bytes, root);
    return;
  }
  DeviceArray<uint8_t> d(*ops_, bytes);
  ops_->copy_from_host(d.data(), host, bytes);
  comm_.broadcast(d.data(), bytes, root, ops_->stream());
  ops_->copy_to_host(host, d.data(), bytes);
}

std::vector<float> DataParallel::full_master(int p) {
  MXDP_CHECK(p >= 0 && p < int(params_.size()), "full_master(", p, "): no such param");
  const ParamPlace& pl = layout_.place[p];
  auto full = full_bucket(buf_[pl.buffer].master, pl.buffer, pl.bucket);
  const int64_t at = pl.offset - layout_.buffers[pl.buffer].buckets[pl.bucket].offset;
  return {full.begin() + at, full.begin() + at + params_[p].numel()};
}

// Checkpoints (format in checkpoint.h). Every rank writes, and reads, only the
// pieces of the shards it owns, a staging buffer at a time; nothing gathers a
// tensor. Each phase ends in an agreement, so that an error on any rank stops
// every rank with that rank's message instead of leaving the others waiting.

namespace {
constexpr int64_t kStageElems = int64_t(1) << 20;  // host staging: 4 MiB of fp32
}  // namespace

void DataParallel::on_every_rank(const std::function<void()>& fn) {
  std::string err;
  try {
    fn();
  } catch (const std::exception& e) {
    err = e.what();
    if (err.empty()) err = "unknown error";
  }
  std::vector<uint64_t> lens(dp_, 0);
  lens[rank_] = err.size();
  host_all_gather(lens.data(), sizeof(uint64_t));
  int first = -1;
  for (int r = 0; r < dp_ && first < 0; ++r)
    if (lens[r]) first = r;
  if (first < 0) return;
  std::string msg(lens[first], '\0');
  if (rank_ == first) msg = err;
  host_broadcast(msg.data(), msg.size(), first);
  throw Error(dp_ > 1 ? "on rank " + std::to_string(first) + ": " + msg : msg);
}

std::vector<uint8_t> DataParallel::broadcast_bytes(std::vector<uint8_t> bytes) {
  uint64_t size = bytes.size();
  host_broadcast(&size, sizeof size, 0);
  bytes.resize(size_t(size));
  for (uint64_t off = 0; off < size; off += (1u << 30))
    host_broadcast(bytes.data() + off, size_t(std::min<uint64_t>(1u << 30, size - off)), 0);
  return bytes;
}

template <class Fn>
void DataParallel::for_each_written_piece(Fn&& fn) {
  // Shard rank_ of every bucket, in both modes: the files of a reference run
  // hold exactly what a sharded run's do.
  for (int f = 0; f < int(buf_.size()); ++f)
    for (int b = 0; b < int(buf_[f].st.size()); ++b) {
      const int64_t off = shard_local_off(f, b, rank_);
      for (const Piece& pc : layout_.buffers[f].buckets[b].shards[rank_])
        if (pc.len > 0) fn(f, pc, off + pc.shard_pos);
    }
}

void DataParallel::check_state_finite(const std::string& path) {
  // The first param (lowest index) with a non-finite master or moment, over all ranks.
  int bad = int(params_.size()), bad_tensor = 0;
  for_each_written_piece([&](int f, const Piece& pc, int64_t at) {
    const BufferState& bs = buf_[f];
    int t = 0;
    for (const float* x : {bs.master.data(), bs.m.data(), bs.v.data()}) {
      if (pc.param < bad && !std::isfinite(ops_->sum_squares(x + at, pc.len))) bad = pc.param, bad_tensor = t;
      ++t;
    }
  });
  std::vector<int32_t> all(2 * size_t(dp_));
  all[2 * rank_] = bad;
  all[2 * rank_ + 1] = bad_tensor;
  host_all_gather(all.data(), 2 * sizeof(int32_t));
  for (int r = 0; r < dp_; ++r)
    if (all[2 * r] < bad) bad = all[2 * r], bad_tensor = all[2 * r + 1];
  if (bad == int(params_.size())) return;
  static const char* kTensor[] = {"fp32 master weights", "AdamW first moments", "AdamW second moments"};
  MXDP_FAIL("not saving checkpoint '", path, "': the ", kTensor[bad_tensor], " of param '", params_[bad].name,
            "' are not finite (NaN or Inf) after step ", iteration_,
            ": the run has diverged, and a checkpoint of it would replace good ones");
}

RankFileInfo DataParallel::write_rank_file(const std::string& dir) {
  std::vector<StoredPiece> pieces;
  for_each_written_piece([&](int, const Piece& pc, int64_t) { pieces.push_back({pc.param, pc.param_begin, pc.len}); });
  RankFileWriter w((std::filesystem::path(dir) / rank_file_name(rank_)).string(), rank_, std::move(pieces));
  std::vector<float> host(static_cast<size_t>(kStageElems));
  for_each_written_piece([&](int f, const Piece& pc, int64_t at) {
    BufferState& bs = buf_[f];
    for (const float* src : {bs.master.data() + at, bs.m.data() + at, bs.v.data() + at})
      for (int64_t done = 0; done < pc.len; done += kStageElems) {
        const int64_t n = std::min(kStageElems, pc.len - done);
        ops_->copy_to_host(host.data(), src + done, size_t(n) * sizeof(float));
        w.append(host.data(), size_t(n));
      }
  });
  return w.finish();
}

void DataParallel::save_checkpoint(const std::string& path, const nlohmann::json& extra) {
  resolve_all();  // the AdamW count it stores
  MXDP_CHECK(micro_ == 0, "save_checkpoint in the middle of a step (", micro_,
             " micro-batches accumulated): save after optimizer_step()");
  MXDP_CHECK(extra.is_object() || extra.is_null(), "save_checkpoint: extra must be a JSON object, got a ",
             extra.type_name());
  check_state_finite(path);
  const auto bcast0 = [&](void* p, size_t n) { host_broadcast(p, n, 0); };
  // Rank 0 stages the directory beside its final place; every rank learns where.
  std::string staged;
  on_rank0(comm_, [&] {
    staged = temporary_path(path);
    std::error_code ec;
    std::filesystem::remove_all(staged, ec);
    create_directories(staged);
  }, bcast0);
  const std::vector<uint8_t> name = broadcast_bytes(std::vector<uint8_t>(staged.begin(), staged.end()));
  staged.assign(name.begin(), name.end());
  try {
    RankFileInfo mine;
    on_every_rank([&] { mine = write_rank_file(staged); });
    // Every rank's file is complete and synced: rank 0 writes the manifest last.
    std::vector<uint64_t> files(2 * size_t(dp_));
    files[2 * rank_] = mine.bytes;
    files[2 * rank_ + 1] = mine.header_checksum;
    host_all_gather(files.data(), 2 * sizeof(uint64_t));
    on_rank0(comm_, [&] {
      CheckpointManifest m;
      m.version = updates_;
      m.iteration = iteration_;
      m.extra = extra.is_null() ? nlohmann::json::object() : extra;
      for (const ParamSpec& p : params_) m.params.push_back({p.name, p.shape, p.numel()});
      for (int r = 0; r < dp_; ++r) m.files.push_back({rank_file_name(r), files[2 * r], files[2 * r + 1]});
      const std::vector<uint8_t> bytes = serialize_manifest(m);
      File f = File::create((std::filesystem::path(staged) / kManifestName).string());
      f.write(bytes.data(), bytes.size());
      f.sync();
      f.close();
      commit_directory(staged, path);
    }, bcast0);
  } catch (const std::exception& e) {
    if (rank_ == 0) {
      std::error_code ec;
      std::filesystem::remove_all(staged, ec);
    }
    MXDP_FAIL("saving checkpoint '", path, "' failed: ", e.what());
  }
}

nlohmann::json DataParallel::load_checkpoint(const std::string& path) {
  drop_inflight();
  resolve_all();
  // Rank 0 decides what `path` is and reads the manifest (or a single-file
  // checkpoint); the bytes, or the error, go to every rank.
  std::vector<uint8_t> bytes;
  uint8_t single_file = 0;
  on_rank0(comm_, [&] {
    try {
      if (is_step_directory(path)) {
        bytes = read_file((std::filesystem::path(path) / kManifestName).string(), kMaxManifestBytes);
        parse_manifest(bytes, (std::filesystem::path(path) / kManifestName).string());
      } else {
        std::error_code ec;
        MXDP_CHECK(!std::filesystem::is_directory(path, ec), "'", path, "' is a directory without a ", kManifestName,
                   ": not a checkpoint (an interrupted save?)");
        single_file = 1;
        bytes = read_file(path);
        deserialize_checkpoint(bytes, path);
      }
    } catch (const std::exception& e) {
      MXDP_FAIL("loading checkpoint failed on rank 0: ", e.what());
    }
  }, [&](void* p, size_t n) { host_broadcast(p, n, 0); });
  host_broadcast(&single_file, 1, 0);
  bytes = broadcast_bytes(std::move(bytes));
  return single_file ? load_single_file(path, bytes)
                     : load_step_directory(path, parse_manifest(bytes, (std::filesystem::path(path) / kManifestName).string()));
}

void DataParallel::check_params_match(const std::string& path, const std::vector<CheckpointParam>& ps) const {
  MXDP_CHECK(ps.size() == params_.size(), path, ": checkpoint holds ", ps.size(), " params, the model has ",
             params_.size());
  for (size_t p = 0; p < params_.size(); ++p)
    MXDP_CHECK(ps[p].name == params_[p].name && ps[p].shape == params_[p].shape, path, ": param ", p, " is '",
               ps[p].name, "' in the checkpoint but '", params_[p].name, "' in the model (or their shapes differ)");
}

void DataParallel::reset_state_for_load() {
  for (BufferState& bs : buf_) {
    for (auto* a : {&bs.master, &bs.m, &bs.v}) ops_->zero(a->data(), a->bytes());
    for (BucketState& st : bs.st) st = BucketState{};  // nothing derived from the old masters survives
  }
  micro_ = 0;
}

nlohmann::json DataParallel::load_step_directory(const std::string& path, CheckpointManifest m) {
  std::vector<CheckpointParam> ps = m.params;
  check_params_match(path, ps);
  const int64_t version = m.version, iteration = m.iteration;
  nlohmann::json extra = m.extra;
  on_every_rank([&] {
    CheckpointReader reader(path, std::move(m));
    reader.prefer(rank_);
    // Every owned range must be stored before any state changes.
    for_each_owned_piece([&](int, const Piece& pc, int64_t) {
      if (pc.len > 0) reader.check_stored(pc.param, pc.param_begin, pc.len);
    });
    reset_state_for_load();
    std::vector<float> host(static_cast<size_t>(kStageElems));
    for_each_owned_piece([&](int f, const Piece& pc, int64_t at) {
      BufferState& bs = buf_[f];
      int t = 0;
      for (float* dst : {bs.master.data() + at, bs.m.data() + at, bs.v.data() + at}) {
        for (int64_t done = 0; done < pc.len; done += kStageElems) {
          const int64_t n = std::min(kStageElems, pc.len - done);
          reader.read(pc.param, pc.param_begin + done, n, t, host.data());
          ops_->copy_from_host(dst + done, host.data(), size_t(n) * sizeof(float));
        }
        ++t;
      }
    });
  });
  set_loaded_counts(version, iteration);
  return extra;
}

nlohmann::json DataParallel::load_single_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  // The version-1 format: the whole checkpoint in one file, on every rank.
  CheckpointData c = deserialize_checkpoint(bytes, path);
  std::vector<CheckpointParam> ps;
  for (const ParamState& p : c.params) ps.push_back({p.name, p.shape, int64_t(p.master.size())});
  check_params_match(path, ps);
  reset_state_for_load();
  for_each_owned_piece([&](int f, const Piece& pc, int64_t at) {
    BufferState& bs = buf_[f];
    const ParamState& s = c.params[pc.param];
    const size_t n = pc.len * sizeof(float);
    ops_->copy_from_host(bs.master.data() + at, s.master.data() + pc.param_begin, n);
    ops_->copy_from_host(bs.m.data() + at, s.m.data() + pc.param_begin, n);
    ops_->copy_from_host(bs.v.data() + at, s.v.data() + pc.param_begin, n);
  });
  set_loaded_counts(c.version, c.iteration);
  return c.extra;
}

}  // namespace mxdp
