// DataParallel, the facade: construction, and the life of a step as callers
// drive it (forward_backward, launch_step, eval, sync_weights, save, load).
// The parts are classes of their own: EngineBuffers (buffers.h),
// BucketSync (bucket_sync.h), ShardedOptimizer (sharded_optimizer.h) and
// ShardedCheckpoint (sharded_checkpoint.h).
#include "engine/engine.h"

#include "util/check.h"

namespace mxdp {

namespace {

DpOptions validated(DpOptions opt, int dp, const Model& model) {
  opt.validate(dp);
  MXDP_CHECK(opt.compute_dtype != LinearCompute::Fp8 || model.reads_fp8_weights(),
             "compute_dtype fp8: this model does not compute with FP8 weights (yet); use compute_dtype bf16");
  return opt;
}

std::vector<ParamSpec> checked_params(const Model& model, const Communicator& comm, const EngineOps& ops) {
  MXDP_CHECK(ops.device_memory() == comm.device_memory(), "the engine's ops work on ",
             ops.device_memory() ? "device" : "host", " memory but the communicator on ",
             comm.device_memory() ? "device" : "host", " memory");
  MXDP_CHECK(!model.params().empty(), "the model has no parameters");
  return model.params();
}

}  // namespace

DataParallel::DataParallel(Model& model, Communicator& comm, const DpOptions& opt, EngineOps* ops)
    : model_(model),
      comm_(comm),
      own_ops_(ops ? nullptr : make_cpu_ops()),
      ops_(ops ? ops : own_ops_.get()),
      opt_(validated(opt, comm.size(), model)),
      params_(checked_params(model, comm, *ops_)),
      layout_(Layout::build(params_, opt_.weight_format, opt_.bucket_elems(comm.size()), comm.size(), opt_.layout_order)),
      bufs_(layout_, opt_, *ops_, comm.rank(), comm.size(), params_),
      sync_(model, comm, *ops_, opt_, params_, layout_, bufs_),
      optim_(comm, *ops_, opt_, layout_, bufs_, sync_),
      ckpt_(comm, *ops_, opt_, params_, layout_, bufs_, sync_) {
  // The model's initial weights become the masters of the shards this rank owns.
  bufs_.for_each_owned_piece([&](int f, const Piece& pc, int64_t at) {
    ops_->copy(bufs_[f].master.data() + at, model_.initial_weights(pc.param) + pc.param_begin,
               pc.len * sizeof(float));
  });
  model_.release_initial_weights();
}

DataParallel::~DataParallel() {
  try {
    sync_.drop_inflight();
  } catch (...) {
  }
}

void DataParallel::forward_backward(const Batch& batch) {
  MXDP_CHECK(micro_ < opt_.micro_batches, "forward_backward: ", micro_,
             " micro-batches already accumulated; call optimizer_step() first");
  sync_.begin_forward(false);
  model_.forward_into(batch, sync_, optim_.micro_loss(micro_));
  sync_.end_forward();
  sync_.backward(model_, micro_ == 0, micro_ == opt_.micro_batches - 1);
  ++micro_;
}

StepResult DataParallel::train_step(const std::vector<Batch>& micro_batches) {
  MXDP_CHECK(int(micro_batches.size()) == opt_.micro_batches, "train_step got ",
             micro_batches.size(), " micro-batches, options say micro_batches = ", opt_.micro_batches);
  for (const Batch& b : micro_batches) forward_backward(b);
  return optimizer_step();
}

void DataParallel::launch_step() {
  MXDP_CHECK(micro_ == opt_.micro_batches, "optimizer step after ", micro_, " of ", opt_.micro_batches,
             " micro-batches");
  micro_ = 0;
  optim_.launch();
}

std::optional<StepResult> DataParallel::take_result(bool wait) { return optim_.take_result(wait); }

StepResult DataParallel::optimizer_step() {
  launch_step();
  StepResult r;
  while (auto x = take_result(true)) r = std::move(*x);
  return r;
}

void DataParallel::sync_weights() { sync_.sync_all(); }

double DataParallel::eval(const std::vector<Batch>& batches) {
  MXDP_CHECK(!batches.empty(), "eval needs at least one batch");
  // Each batch's loss stays in ops memory until the last is done: one read.
  DeviceArray<float> dev(*ops_, batches.size());
  try {
    for (size_t i = 0; i < batches.size(); ++i) {
      sync_.begin_forward(true);
      model_.forward_into(batches[i], sync_, dev.data() + i);
    }
  } catch (...) {
    sync_.end_forward();
    throw;
  }
  sync_.end_forward();
  std::vector<float> host(batches.size());
  ops_->copy_to_host(host.data(), dev.data(), dev.bytes());
  double sum = 0;
  for (float l : host) sum += l;
  const int dp = comm_.size();
  std::vector<double> losses(dp);
  losses[comm_.rank()] = sum / double(batches.size());
  comm_.host_all_gather(losses.data(), sizeof(double));
  double total = 0;
  for (double l : losses) total += l;
  return total / dp;
}

void DataParallel::save_checkpoint(const std::string& path, const nlohmann::json& extra) {
  MXDP_CHECK(micro_ == 0, "save_checkpoint in the middle of a step (", micro_,
             " micro-batches accumulated): save after optimizer_step()");
  ckpt_.save(path, extra, optim_.updates(), optim_.iteration());  // updates(): every result read first
}

nlohmann::json DataParallel::load_checkpoint(const std::string& path) {
  sync_.drop_inflight();
  optim_.resolve_all();  // results of steps before the load stay takeable
  ShardedCheckpoint::Loaded l = ckpt_.load(path);
  micro_ = 0;
  optim_.set_loaded_counts(l.updates, l.iteration);
  return std::move(l.extra);
}

std::vector<float> DataParallel::full_master(int param) { return ckpt_.full_master(param); }

int64_t DataParallel::version() { return optim_.updates(); }
int64_t DataParallel::skipped_steps() { return optim_.skipped_steps(); }

MemoryPlan DataParallel::allocated() const {
  return bufs_.allocated(params_, sync_.last_step_gather_bytes(), sync_.last_step_reduce_bytes());
}

}  // namespace mxdp
