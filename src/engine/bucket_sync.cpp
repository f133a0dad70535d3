// BucketSync (bucket_sync.h): the freshness chain (stage, start/finish gather,
// unpack, weights_for_forward, check_fresh) and the gradient reduce-scatters.
#include <algorithm>
#include <cstring>

#include "engine/bucket_sync.h"
#include "formats/format.h"
#include "util/check.h"

#include "engine/fault_macros.h"

namespace mxdp {

BucketSync::BucketSync(Model& model, Communicator& comm, EngineOps& ops, const DpOptions& opt,
                       const std::vector<ParamSpec>& params, const Layout& layout, EngineBuffers& bufs)
    : model_(model),
      comm_(comm),
      ops_(ops),
      opt_(opt),
      params_(params),
      layout_(layout),
      bufs_(bufs),
      rank_(comm.rank()),
      dp_(comm.size()),
      zero_amax_(ops, 1) {  // zero-filled, never written
  const int nl = model.num_layers();
  layer_params_.assign(nl, {});
  for (int p = 0; p < int(params.size()); ++p) {
    MXDP_CHECK(params[p].layer >= 0 && params[p].layer < nl, "param '", params[p].name, "' names layer ",
               params[p].layer, " but the model has ", nl, " layers");
    layer_params_[params[p].layer].push_back(p);
  }
  fwd_order_ = layout.forward_order();
  for (const GatherBuffer& gb : layout.buffers) {
    st_.emplace_back(gb.buckets.size());
    unpack_.emplace_back(gb.buckets.size());
    fp8_tables_.emplace_back(gb.buckets.size());
  }
  make_stage_ranges();
}

// The fused AdamW + stage of a format without a tensor amax runs a whole shard
// in one adamw_quantize_ranges. A row-block format's ranges are the runs of
// consecutive pieces with the same weight decay, the padding around them
// included (its grads, moments and masters are zero and stay zero under AdamW
// with any decay). Ranges start at piece starts, which are whole blocks of the
// format, so the blocks are those of the whole shard. A slab format's ranges
// are its pieces, each a matrix with its own tiles (the padding between them
// has no scales: stage_slabs). The layout fixes them: made (and, on a GPU,
// uploaded) here, so no step waits on the host for them.
void BucketSync::make_stage_ranges() {
  stage_ranges_.resize(layout_.buffers.size());
  for (size_t f = 0; f < layout_.buffers.size(); ++f) {
    const GatherBuffer& gb = layout_.buffers[f];
    const FormatTraits& ft = format_traits(gb.format);
    stage_ranges_[f].resize(gb.buckets.size());
    if (ft.tensor_amax) continue;  // staged piece by piece, in two passes (stage_tensor_scaled)
    for (size_t b = 0; b < gb.buckets.size(); ++b) {
      const Bucket& bk = gb.buckets[b];
      stage_ranges_[f][b].resize(size_t(dp_));
      for (int s = 0; s < dp_; ++s) {
        if (!bufs_.owns(s)) continue;
        std::vector<AdamWRange> runs;
        const std::vector<Piece>& pcs = bk.shards[s];
        const auto choice = [&](int p) { return params_[p].decay ? kWithDecay : kNoDecay; };
        if (ft.block_rows > 1) {
          for (const Piece& pc : pcs)
            runs.push_back({pc.shard_pos, pc.len, choice(pc.param), params_[pc.param].shape[1], pc.scale_pos});
        } else {
          int64_t begin = 0;
          int run_param = pcs.empty() ? bk.params.front() : pcs.front().param;
          const auto close_run = [&](int64_t end) {
            if (end > begin) runs.push_back({begin, end - begin, choice(run_param)});
          };
          for (const Piece& pc : pcs) {
            if (params_[pc.param].decay == params_[run_param].decay) continue;
            close_run(pc.shard_pos);  // adamw_ranges refuses a range that starts inside a block
            begin = pc.shard_pos;
            run_param = pc.param;
          }
          close_run(bk.shard_numel);
        }
        stage_ranges_[f][b][s] = ops_.adamw_ranges(gb.format, std::move(runs));
      }
    }
  }
}

void BucketSync::restart_at(int64_t version) {
  drop_inflight();
  for (auto& buffer : st_)
    for (BucketState& st : buffer) st = BucketState{};
  version_ = version;
}

// ---------------------------------------------------------------- the chain

// Quantizes the shards this rank owns into the bucket's payload. With `u` (the
// optimizer step) AdamW runs first, in the same pass over memory: the fused ops
// read g, m, v and the master once and write m, v, the master and the payload.
// Every element gets exactly the bits of adamw() then quantize() (engine_ops.h).
// How depends on the format's scales: one per tensor, per 128x128 tile of a
// slab, or per block of a row.
void BucketSync::stage(int f, int b, const Update* u) {
  const GatherBuffer& gb = layout_.buffers[f];
  BucketState& st = st_[f][b];
  if (bufs_.reused(f))
    MXDP_CHECK(st.region != Region::Grads, "staging bucket ", b, " of the ", to_string(gb.format),
               " buffer into its grad region, which still holds live gradients");
  const Bucket& bk = gb.buckets[b];
  const Staging t{gb, bk, bufs_[f], payload_shape(gb.format, bk), format_traits(gb.format), bufs_.payload_ptr(f, b)};
  if (t.ft.tensor_amax)
    stage_tensor_scaled(t, f, b, u);
  else if (t.ft.block_rows > 1)
    stage_slabs(t, f, b, u);
  else
    stage_rows(t, f, b, u);
  st.staged_v = version_;
  if (bufs_.reused(f)) st.region = Region::Payload;
  // Reference mode: every rank staged every shard; there is nothing to gather.
  if (!opt_.distributed_optimizer) st.gathered_v = st.staged_v;
}

std::array<AdamWChoice, 2> BucketSync::stage_choices(const Update& u) const {
  std::array<AdamWChoice, 2> c;
  c[kNoDecay] = adamw_for(u, false);
  c[kWithDecay] = adamw_for(u, true);
  return c;
}

AdamWChoice BucketSync::adamw_for(const Update& u, bool decay) const {
  return adamw_choice(AdamWParams{u.lr, float(opt_.adam_beta1), float(opt_.adam_beta2), float(opt_.adam_eps),
                                  decay ? float(opt_.weight_decay) : 0.0f, u.first_t});
}

// One tensor scale per param: the max over every shard's amax of the (updated)
// master, so each rank quantizes its piece exactly as a rank holding the whole
// tensor would. Pass 1 (fused with AdamW) folds each piece's amax into its
// param's slot in device memory, the slots are all-reduced on the device, and
// pass 2 quantizes reading them there: no host round trip.
void BucketSync::stage_tensor_scaled(const Staging& t, int f, int b, const Update* u) {
  const auto& [gb, bk, bs, ps, ft, base] = t;
  float* am = bs.amax.data() + bs.amax_off[b];
  ops_.zero(am, bk.params.size() * sizeof(float));
  const auto pass1 = [&](const Piece& pc, int64_t off) {
    const int64_t at = off + pc.shard_pos;
    float* slot = bufs_.param_amax(pc.param);
    if (u)
      ops_.adamw_amax(bs.master.data() + at, bs.m.data() + at, bs.v.data() + at, bs.main_grad + at, pc.len, u->ctl,
                      adamw_for(*u, params_[pc.param].decay), slot);
    else
      ops_.amax_into(bs.master.data() + at, pc.len, slot);
  };
  // dp 1: each param of the bucket is one piece of its one shard, so its amax
  // is complete after its own pass 1, and pass 2 follows right away (reading
  // masters just written, from L2 when the param fits there).
  const bool per_piece = dp_ == 1;
  if (!per_piece) {
    for (int s = 0; s < dp_; ++s) {
      if (!bufs_.owns(s)) continue;
      for (const Piece& pc : bk.shards[s])
        if (pc.len > 0) pass1(pc, bufs_.shard_local_off(f, b, s));
    }
    if (opt_.distributed_optimizer && dp_ > 1)
      comm_.all_reduce(am, am, bk.params.size(), DType::F32, RedOp::Max, ops_.stream());
  }
  for (int s = 0; s < dp_; ++s) {
    if (!bufs_.owns(s)) continue;
    const int64_t off = bufs_.shard_local_off(f, b, s);
    const float* x = bs.master.data() + off;
    uint8_t* slot = base + s * ps.shard_bytes;
    // Segment [at, at + len) of the shard with the tensor amax `amax`: its
    // codes, and its block scales after the shard's codes.
    const auto quantize = [&](int64_t at, int64_t len, const float* amax) {
      ops_.quantize(gb.format, opt_.mxfp8_scale_rounding, x + at, len, amax, slot + ft.code_bytes(at),
                    slot + ps.code_bytes + ft.scales_bytes(at));
    };
    // Each piece with its param's tensor amax, the padding between pieces as
    // zeros (amax 0).
    int64_t pos = 0;
    for (const Piece& pc : bk.shards[s]) {
      if (pc.shard_pos > pos) quantize(pos, pc.shard_pos - pos, zero_amax_.data());
      if (pc.len > 0) {
        if (per_piece) pass1(pc, off);
        quantize(pc.shard_pos, pc.len, bufs_.param_amax(pc.param));
      }
      pos = pc.shard_pos + pc.len;
    }
    if (bk.shard_numel > pos) quantize(pos, bk.shard_numel - pos, zero_amax_.data());
  }
}

// Slab formats (fp8b128): each piece a (len / cols) x cols matrix of whole
// 128-row slabs of its param (the layout guarantees it; the last may be
// short), so its tiles are the param's own, its scales at the piece's
// scale_pos; with AdamW, every owned shard's pieces in one pass
// (make_stage_ranges). The padding between pieces has no scales: its masters
// are 0 and its codes stay the zeros (E4M3 0) the payload was allocated with
// (a slab format's payload never lives in the grad buffer).
void BucketSync::stage_slabs(const Staging& t, int f, int b, const Update* u) {
  const auto& [gb, bk, bs, ps, ft, base] = t;
  for (int s = 0; s < dp_; ++s) {
    if (!bufs_.owns(s)) continue;
    const int64_t off = bufs_.shard_local_off(f, b, s);
    uint8_t* slot = base + s * ps.shard_bytes;
    if (u) {
      ops_.adamw_quantize_ranges(opt_.mxfp8_scale_rounding, bs.master.data() + off, bs.m.data() + off,
                                 bs.v.data() + off, bs.main_grad + off, u->ctl, stage_choices(*u),
                                 *stage_ranges_[f][b][s], slot, slot + ps.code_bytes);
      continue;
    }
    for (const Piece& pc : bk.shards[s]) {
      const int64_t cols = params_[pc.param].shape[1], e = off + pc.shard_pos;
      ops_.quantize(gb.format, opt_.mxfp8_scale_rounding, bs.master.data() + e, pc.len, nullptr,
                    slot + ft.code_bytes(pc.shard_pos), slot + ps.scales_at(pc), cols);
    }
  }
}

// Row-block formats without a tensor scale: each owned shard in one call, the
// shard's codes then its scales; with AdamW, in one pass over the shard's
// decay runs (make_stage_ranges).
void BucketSync::stage_rows(const Staging& t, int f, int b, const Update* u) {
  const auto& [gb, bk, bs, ps, ft, base] = t;
  for (int s = 0; s < dp_; ++s) {
    if (!bufs_.owns(s)) continue;
    const int64_t off = bufs_.shard_local_off(f, b, s);
    uint8_t* slot = base + s * ps.shard_bytes;
    if (!u) {
      ops_.quantize(gb.format, opt_.mxfp8_scale_rounding, bs.master.data() + off, bk.shard_numel, nullptr, slot,
                    slot + ps.code_bytes);
      continue;
    }
    ops_.adamw_quantize_ranges(opt_.mxfp8_scale_rounding, bs.master.data() + off, bs.m.data() + off,
                               bs.v.data() + off, bs.main_grad + off, u->ctl, stage_choices(*u),
                               *stage_ranges_[f][b][s], slot, slot + ps.code_bytes);
  }
}

void BucketSync::start_gather(int f, int b) {
  BucketState& st = st_[f][b];
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
  const PayloadShape ps = payload_shape(layout_.buffers[f].format, layout_.buffers[f].buckets[b]);
  uint8_t* base = bufs_.payload_ptr(f, b);
  st.gather = comm_.all_gather_async(base + rank_ * ps.shard_bytes, base, ps.shard_bytes, ops_.stream());
  gather_bytes_ += dp_ * ps.shard_bytes;
  st.gather_v = st.staged_v;
  st.gather_done = false;
}

void BucketSync::finish_gather(int f, int b) {
  BucketState& st = st_[f][b];
  if (!st.gather) return;
  if (!st.gather_done) st.gather->wait();
  st.gathered_v = st.gather_v;  // a record kept by the fault carries its old version
  if (in_eval_ && MXDP_FAULT(skip_deferred_reset_after_eval))
    st.gather_done = true;  // the bug: the consumed gather stays recorded as pending
  else
    st.gather.reset();
}

void BucketSync::unpack(int f, int b) {
  const GatherBuffer& gb = layout_.buffers[f];
  const Bucket& bk = gb.buckets[b];
  if (bufs_.reused(f))
    MXDP_CHECK(st_[f][b].region == Region::Payload, "unpacking bucket ", b,
               " from its grad region, which does not hold a gathered payload");
  fp8_unpack(f, b);  // the params the model reads as FP8 (none without FP8 compute)
  // Every piece of every shard in one dequantize_pieces launch. The table of
  // pointers stays in ops memory and is uploaded again only if it changed
  // (compute weights are fixed for a model's life, so: once per bucket).
  const PayloadShape ps = payload_shape(gb.format, bk);
  const FormatTraits& ft = format_traits(gb.format);
  const uint8_t* base = bufs_.payload_ptr(f, b);
  const ComputeDType dt = model_.compute_dtype();
  const int64_t esize = dt == ComputeDType::F32 ? 4 : 2;
  std::vector<UnpackPiece> t;
  int64_t max_len = 0;
  for (int s = 0; s < dp_; ++s) {
    const uint8_t* slot = base + s * ps.shard_bytes;
    for (const Piece& pc : bk.shards[s]) {
      if (pc.len <= 0 || reads_fp8(pc.param)) continue;
      UnpackPiece u;
      u.dst = static_cast<uint8_t*>(model_.compute_weights(pc.param)) + pc.param_begin * esize;
      u.len = pc.len;
      const int64_t at = pc.shard_pos;
      u.codes = slot + ft.code_bytes(at);
      if (ft.scale_bytes > 0) u.scales = slot + ps.scales_at(pc);
      if (ft.tensor_amax) u.amax = bufs_.param_amax(pc.param);
      if (ft.block_rows > 1) u.cols = params_[pc.param].shape[1];
      max_len = std::max(max_len, pc.len);
      t.push_back(u);
    }
  }
  if (t.empty()) return;
  UnpackTable& ut = unpack_[f][b];
  ut.hold(ops_, std::move(t));
  ut.max_len = max_len;
  ops_.dequantize_pieces(gb.format, ut.dev.data(), int(ut.host.size()), ut.max_len, dt);
}

void BucketSync::weights_for_forward(int f, int b) {
  BucketState& st = st_[f][b];
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

void BucketSync::check_fresh(int p) const {
  const ParamPlace& pl = layout_.place[p];
  const BucketState& st = st_[pl.buffer][pl.bucket];
  MXDP_CHECK(st.weights_v == version_, "stale weights: layer ", params_[p].layer, " is about to read '",
             params_[p].name, "' at version ", st.weights_v, ", but the latest optimizer step made version ",
             version_);
}

void BucketSync::before_layer(int layer) {
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

void BucketSync::begin_forward(bool eval) {
  cursor_ = 0;
  in_eval_ = eval;
}

void BucketSync::sync_all() {
  for (auto [f, b] : fwd_order_) weights_for_forward(f, b);
}

void BucketSync::publish(const Update& u) {
  // AdamW and stage, fused, bucket by bucket (a skipped step restages the same
  // masters); then gather now, or (overlap) dispatch only the first bucket the
  // next forward needs and defer the rest to the forward itself.
  for (auto [f, b] : fwd_order_) stage(f, b, &u);
  if (!opt_.overlap_param_gather) {
    for (auto [f, b] : fwd_order_) start_gather(f, b);
    for (auto [f, b] : fwd_order_) {
      finish_gather(f, b);
      MXDP_CHECK(st_[f][b].gathered_v == version_, "stale gather: bucket ", b, " of the ",
                 to_string(layout_.buffers[f].format), " buffer gathered version ", st_[f][b].gathered_v,
                 " right after the step that made version ", version_);
    }
  } else if (!fwd_order_.empty()) {
    start_gather(fwd_order_[0].first, fwd_order_[0].second);
  }
}

void BucketSync::close_traffic_window() {
  last_gather_bytes_ = gather_bytes_;
  last_reduce_bytes_ = reduce_bytes_;
  gather_bytes_ = reduce_bytes_ = 0;
}

// ---------------------------------------------------------------- gradients

float* BucketSync::grad(int p) {
  MXDP_CHECK(in_backward_, "grad(", p, ") asked outside backward");
  MXDP_CHECK(p >= 0 && p < int(params_.size()), "grad(", p, "): no such param");
  const ParamPlace& pl = layout_.place[p];
  return bufs_[pl.buffer].grad.data() + pl.offset;
}

void BucketSync::backward(Model& model, bool first_micro, bool last_micro) {
  if (first_micro) begin_backward();
  for (size_t f = 0; f < st_.size(); ++f)
    for (size_t b = 0; b < st_[f].size(); ++b)
      st_[f][b].grads_pending = int(layout_.buffers[f].buckets[b].params.size());
  last_micro_ = last_micro;
  in_backward_ = true;
  try {
    model.backward(*this);
  } catch (...) {
    in_backward_ = false;
    throw;
  }
  in_backward_ = false;
  for (size_t f = 0; f < st_.size(); ++f)
    for (size_t b = 0; b < st_[f].size(); ++b)
      MXDP_CHECK(st_[f][b].grads_pending == 0, "backward ended but bucket ", b, " has ", st_[f][b].grads_pending,
                 " params whose after_layer_backward never came");
  if (last_micro && !opt_.overlap_grad_reduce)
    for (size_t f = 0; f < st_.size(); ++f)
      for (size_t b = 0; b < st_[f].size(); ++b) start_reduce(int(f), int(b));
}

void BucketSync::begin_backward() {
  for (size_t f = 0; f < st_.size(); ++f)
    for (size_t b = 0; b < st_[f].size(); ++b) {
      BucketState& st = st_[f][b];
      // Grad-buffer reuse: the region may hold the gathered payload; only once
      // the weights are unpacked from it may backward overwrite it.
      MXDP_CHECK(st.weights_v == version_, "backward would overwrite bucket ", b,
                 " whose weights (version ", st.weights_v, ") were never unpacked for version ", version_);
      MXDP_CHECK(!st.reducing, "bucket ", b, " still has a reduce-scatter in flight");
      const Bucket& bk = layout_.buffers[f].buckets[b];
      ops_.zero(bufs_[f].grad.data() + bk.offset, bk.numel * sizeof(float));
      if (bufs_.reused(int(f))) {
        st.region = Region::Grads;
        st.staged_v = -1;  // rank r's staged slice is gone with the zeroing
        st.gathered_v = -1;
      }
    }
}

void BucketSync::after_layer_backward(int layer) {
  MXDP_CHECK(in_backward_, "after_layer_backward(", layer, ") outside backward");
  for (int p : layer_params_[layer]) {
    const ParamPlace& pl = layout_.place[p];
    BucketState& st = st_[pl.buffer][pl.bucket];
    MXDP_CHECK(st.grads_pending > 0, "gradient of '", params_[p].name, "' completed twice");
    if (--st.grads_pending == 0 && last_micro_ && opt_.overlap_grad_reduce) start_reduce(pl.buffer, pl.bucket);
  }
  // MPI makes progress on outstanding collectives only inside MPI calls.
  for (auto& buffer : st_)
    for (auto& st : buffer)
      if (st.reduce) st.reduce->test();
}

void BucketSync::start_reduce(int f, int b) {
  const Bucket& bk = layout_.buffers[f].buckets[b];
  BufferState& bs = bufs_[f];
  BucketState& st = st_[f][b];
  MXDP_CHECK(!st.reducing, "bucket ", b, " reduce-scatter started twice");
  st.reducing = true;
  float* g = bs.grad.data() + bk.offset;
  float* out = bs.main_grad + bufs_.shard_local_off(f, b, rank_);
  // One rank, fp32, main grads aliasing the grad buffer: the reduce-scatter
  // would copy the bucket onto itself. Nothing to do.
  if (bs.aliased && opt_.grad_reduce_dtype == GradReduceDType::Fp32) return;
  reduce_bytes_ += bk.numel * (opt_.grad_reduce_dtype == GradReduceDType::Fp32 ? 4 : 2);
  if (opt_.grad_reduce_dtype == GradReduceDType::Fp32) {
    st.reduce = comm_.reduce_scatter_async(g, out, bk.shard_numel, DType::F32, RedOp::Avg, ops_.stream());
  } else {
    uint16_t* g16 = bs.grad_bf16.data() + bk.offset;
    ops_.to_bf16(g, g16, bk.numel);
    st.reduce = comm_.reduce_scatter_async(g16, bs.shard_bf16.data() + bs.shard_off[b], bk.shard_numel,
                                           DType::BF16, RedOp::Avg, ops_.stream());
  }
}

void BucketSync::finish_reduce(int f, int b) {
  const Bucket& bk = layout_.buffers[f].buckets[b];
  BufferState& bs = bufs_[f];
  BucketState& st = st_[f][b];
  MXDP_CHECK(st.reducing, "bucket ", b, " has no reduce-scatter to finish");
  st.reducing = false;
  if (st.reduce) st.reduce->wait();
  st.reduce.reset();
  float* out = bs.main_grad + bufs_.shard_local_off(f, b, rank_);
  if (opt_.grad_reduce_dtype == GradReduceDType::Bf16) {
    // (aliased: the grad buffer, whose grads the bf16 copy already took)
    ops_.from_bf16(bs.shard_bf16.data() + bs.shard_off[b], out, bk.shard_numel);
  }
  // Reference mode: every rank needs the whole reduced gradient.
  if (!opt_.distributed_optimizer && dp_ > 1) {
    comm_.all_gather(out, bs.main_grad + bs.local_off[b], bk.shard_numel * sizeof(float), ops_.stream());
    gather_bytes_ += bk.numel * int64_t(sizeof(float));
  }
  if (bufs_.reused(f)) st.region = Region::Idle;  // grads consumed: the region may take a payload
}

void BucketSync::finish_reduces() {
  for (size_t f = 0; f < st_.size(); ++f)
    for (size_t b = 0; b < st_[f].size(); ++b) finish_reduce(int(f), int(b));
}

void BucketSync::drop_inflight() {
  for (auto& buffer : st_)
    for (auto& st : buffer) {
      if (st.gather && !st.gather_done) st.gather->wait();
      st.gather.reset();
      if (st.reduce) st.reduce->wait();
      st.reduce.reset();
      st.reducing = false;
    }
}

}  // namespace mxdp
