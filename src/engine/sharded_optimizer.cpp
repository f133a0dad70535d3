// ShardedOptimizer (sharded_optimizer.h): decide (reduce, grad-norm partials,
// the step's scalars on the device), the update through BucketSync::publish,
// and the step results read late (send_results, resolve, take_result).
#include <cstring>

#include "engine/sharded_optimizer.h"
#include "util/check.h"

namespace mxdp {

ShardedOptimizer::ShardedOptimizer(Communicator& comm, EngineOps& ops, const DpOptions& opt, const Layout& layout,
                                   EngineBuffers& bufs, BucketSync& sync)
    : comm_(comm),
      ops_(ops),
      opt_(opt),
      layout_(layout),
      bufs_(bufs),
      sync_(sync),
      rank_(comm.rank()),
      dp_(comm.size()),
      norm_partials_(ops, size_t(dp_) * norm_row()),
      micro_losses_(ops, size_t(opt.micro_batches)),
      ctl_(ops, 1) {
  for (HostArray<uint8_t>& h : host_slots_)
    h = HostArray<uint8_t>(ops, norm_partials_.bytes() + sizeof(StepControl) + micro_losses_.bytes());
}

void ShardedOptimizer::launch() {
  decide();
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
  sync_.advance();
  sync_.publish(BucketSync::Update{float(l.r.lr), updates_ + 1, ctl_.data()});
  sync_.close_traffic_window();
  send_results(l);
  launched_.push_back(std::move(l));
}

int ShardedOptimizer::norm_row() const {
  int nb = 0;
  for (const GatherBuffer& gb : layout_.buffers) nb += int(gb.buckets.size());
  return nb + 1;
}

void ShardedOptimizer::decide() {
  sync_.finish_reduces();

  // Averaged over ranks by the reduce-scatter; over micro-batches here.
  if (opt_.micro_batches > 1) {
    const float inv = float(1.0 / opt_.micro_batches);
    for (int f = 0; f < bufs_.size(); ++f) ops_.scale(bufs_[f].main_grad, int64_t(bufs_[f].master.size()), inv);
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
  for (int f = 0; f < bufs_.size(); ++f)
    for (int b = 0; b < int(layout_.buffers[f].buckets.size()); ++b, ++gi)
      for (int s = 0; s < dp_; ++s)
        if (bufs_.owns(s))
          ops_.sum_squares_into(bufs_[f].main_grad + bufs_.shard_local_off(f, b, s),
                                 layout_.buffers[f].buckets[b].shard_numel, dpart + size_t(s) * row + gi);
  ops_.sum_into(micro_losses_.data(), opt_.micro_batches, dpart + size_t(rank_) * row + nb);
  if (dp_ > 1) comm_.all_gather(dpart + size_t(rank_) * row, dpart, row * sizeof(double), ops_.stream());
  ops_.step_control(dpart, dp_, row, nb, opt_.clip_grad, ctl_.data());
}

// The step's partial sums, control and micro-batch losses travel to the host
// behind its work, into the step's pinned slot; resolve() reads them.
void ShardedOptimizer::send_results(Launched& l) {
  l.slot = next_slot_;
  next_slot_ = (next_slot_ + 1) % kMaxStepsInFlight;
  uint8_t* h = host_slots_[l.slot].data();
  ops_.copy_to_host_async(h, norm_partials_.data(), norm_partials_.bytes());
  ops_.copy_to_host_async(h + norm_partials_.bytes(), ctl_.data(), sizeof(StepControl));
  ops_.copy_to_host_async(h + norm_partials_.bytes() + sizeof(StepControl), micro_losses_.data(),
                           micro_losses_.bytes());
  l.mark = ops_.mark();
}

int ShardedOptimizer::unresolved() const {
  int n = 0;
  for (const Launched& l : launched_) n += l.resolved ? 0 : 1;
  return n;
}

void ShardedOptimizer::resolve(Launched& l) {
  if (l.resolved) return;
  ops_.wait(l.mark);
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

void ShardedOptimizer::resolve_all() {
  for (Launched& l : launched_) resolve(l);
}

std::optional<StepResult> ShardedOptimizer::take_result(bool wait) {
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

void ShardedOptimizer::set_loaded_counts(int64_t updates, int64_t iteration) {
  resolve_all();  // results of steps before the load stay takeable
  StepControl c;
  c.updates = updates;
  ops_.copy_from_host(ctl_.data(), &c, sizeof c);
  updates_ = updates;
  iteration_ = iteration;
  sync_.restart_at(updates);
}

}  // namespace mxdp
