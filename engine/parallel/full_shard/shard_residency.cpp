#include "engine/parallel/full_shard/shard_residency.h"

#include <chrono>
#include <stdexcept>

#include <fmt/format.h>

namespace pt {

FullShardResidency::FullShardResidency(std::map<int, UnitShards*> stages,
                                       const FullShardConfig& config)
    : stages_(std::move(stages)), config_(config) {
  if (config_.prefetch) queue_ = std::make_unique<CollectiveQueue>();
}

UnitShards& FullShardResidency::shards(int stage) const {
  const auto it = stages_.find(stage);
  if (it == stages_.end())
    throw std::logic_error(
        fmt::format("full sharding: stage {} is not held on this device", stage));
  return *it->second;
}

void FullShardResidency::ensure(int stage, size_t u) {
  UnitShards& sh = shards(stage);
  if (const auto it = gathers_.find({stage, u}); it != gathers_.end()) {
    const CollectiveQueue::Ticket ticket = it->second;
    gathers_.erase(it);
    queue_->wait(ticket);
    return;
  }
  const Tensor whole = sh.materialize(u);
  if (!whole.defined()) return;  // whole already, or nothing to gather
  ++collectives_;
  if (!queue_) {
    timed([&] { sh.fill(u, whole); });
    return;
  }
  queue_->wait(queue_->submit([&sh, u, whole] { sh.fill(u, whole); }));
}

void FullShardResidency::prefetch(int stage, size_t u) {
  if (!queue_ || gathers_.count({stage, u})) return;
  UnitShards& sh = shards(stage);
  const Tensor whole = sh.materialize(u);
  if (!whole.defined()) return;
  ++collectives_;
  gathers_[{stage, u}] = queue_->submit([&sh, u, whole] { sh.fill(u, whole); });
}

void FullShardResidency::settle(int stage, size_t u) {
  for (auto it = reduces_.begin(); it != reduces_.end(); ++it)
    if (it->stage == stage && it->unit == u) {
      queue_->wait(it->ticket);
      shards(stage).finish_reduce(u);
      reduces_.erase(it);
      return;
    }
}

void FullShardResidency::reap(bool all) {
  std::vector<PendingReduce> left;
  for (const PendingReduce& r : reduces_) {
    if (all || queue_->done(r.ticket)) {
      queue_->wait(r.ticket);  // rethrows its failure, if any
      shards(r.stage).finish_reduce(r.unit);
    } else {
      left.push_back(r);
    }
  }
  reduces_ = std::move(left);
}

void FullShardResidency::before_compute(int stage, int layer, Pass pass, bool weight_gradient) {
  UnitShards& sh = shards(stage);
  const size_t u = sh.params().unit_of_layer(layer);
  if (queue_) reap(false);
  ensure(stage, u);
  if (weight_gradient) {
    // A reduce-scatter of this unit's last micro-batch may still read its gradients.
    if (queue_) settle(stage, u);
    sh.make_gradients(u);
  }
  // The neighbour this pass reaches next, gathered while this unit computes. Not in a
  // recomputation: its segment may end here, and the backward goes the other way.
  if (pass == Pass::forward && u + 1 < sh.params().num_units()) prefetch(stage, u + 1);
  if (pass == Pass::backward && u > 0) prefetch(stage, u - 1);
}

void FullShardResidency::after_forward(int stage, int layer) {
  UnitShards& sh = shards(stage);
  const size_t u = sh.params().unit_of_layer(layer);
  if (config_.reshard_after_forward && layer + 1 == sh.params().unit(u).last_layer) sh.release(u);
}

void FullShardResidency::after_backward(int stage, int layer, bool weight_gradient, bool final) {
  UnitShards& sh = shards(stage);
  const size_t u = sh.params().unit_of_layer(layer);
  if (layer != sh.params().unit(u).first_layer) return;  // the unit's backward goes on
  // Whole (tied) units are all-reduced in place: only once their gradients are complete.
  if (final || (weight_gradient && config_.reduce_every_microbatch && sh.sharded(u))) {
    if (!queue_) {
      ++collectives_;
      timed([&] { sh.reduce(u); });
    } else if (const Tensor grads = sh.reduce_source(u); grads.defined()) {
      ++collectives_;
      const bool accumulate = sh.accumulates(u);
      reduces_.push_back({stage, u, queue_->submit([&sh, u, grads, accumulate] {
                            sh.reduce_parts(u, grads, accumulate);
                          })});
    }
  }
  if (config_.reshard_after_forward) sh.release(u);
}

void FullShardResidency::timed(const std::function<void()>& collective) {
  const auto t0 = std::chrono::steady_clock::now();
  collective();
  exposed_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void FullShardResidency::finish_run() {
  stats_ = {};
  stats_.buckets = collectives_;
  collectives_ = 0;
  if (!queue_) {
    // On the worker: every second of it exposed.
    stats_.reduce_s = stats_.exposed_s = exposed_s_;
    exposed_s_ = 0;
    return;
  }
  queue_->drain();
  reap(true);
  // A prefetch nobody waited for (a pass that ended before its neighbour): it has run.
  gathers_.clear();
  const CollectiveQueue::Times t = queue_->take_times();
  stats_.reduce_s = t.busy_s;
  stats_.exposed_s = t.waited_s;
}

}  // namespace pt
