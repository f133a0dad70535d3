// DataParallel, the facade: construction, and the life of a step as callers
// drive it (forward_backward, train_step, eval, sync_weights). The parts live
// beside it: buffers.cpp (memory), bucket_sync.cpp (the freshness chain and
// the reduce-scatters), sharded_optimizer.cpp (the step), sharded_checkpoint.cpp.
#include "engine/engine.h"

#include "formats/format.h"
#include "util/check.h"

namespace mxdp {

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
    if (format_traits(gb.format).tensor_amax) {
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
  zero_amax_ = DeviceArray<float>(*ops_, 1);  // zero-filled, never written
  for (HostArray<uint8_t>& h : host_slots_)
    h = HostArray<uint8_t>(*ops_, norm_partials_.bytes() + sizeof(StepControl) + micro_losses_.bytes());
  // The model's initial weights become the masters of the shards this rank owns.
  for_each_owned_piece([&](int f, const Piece& pc, int64_t at) {
    ops_->copy(buf_[f].master.data() + at, model_.initial_weights(pc.param) + pc.param_begin, pc.len * sizeof(float));
  });
  model_.release_initial_weights();
}

DataParallel::~DataParallel() {
  try {
    drop_inflight();
  } catch (...) {
  }
}

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
  comm_.host_all_gather(losses.data(), sizeof(double));
  double total = 0;
  for (double l : losses) total += l;
  return total / dp_;
}

}  // namespace mxdp
