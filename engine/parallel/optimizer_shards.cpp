#include "engine/parallel/optimizer_shards.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/parallel/host_staging.h"

namespace pt {

namespace {

size_t at(int64_t i) { return static_cast<size_t>(i); }

// The f32 element where entry i of the arena begins (the arena's end for i == entries).
int64_t entry_start(const StageParameters& p, size_t i) {
  const size_t bytes = i == p.entries().size()
                           ? p.layout().total_bytes()
                           : p.layout().entries()[p.entries()[i].table_index].offset;
  return static_cast<int64_t>(bytes / sizeof(float));
}

// The size table of entries [first, end): the arena's layout shifted to start at entry first.
// Offsets are aligned the same way in both, so the range's view of the stage's arenas and an
// arena of this table have the same layout (checked below).
SizeTable range_table(const StageParameters& p, const ShardRange& r) {
  SizeTable t;
  for (size_t i = r.first_entry; i < r.end_entry; ++i) {
    const SizeTableEntry& e = p.layout().entries()[p.entries()[i].table_index];
    t.add(e.name, e.shape, e.dtype);
  }
  return t;
}

}  // namespace

std::vector<ShardRange> plan_optimizer_shards(const StageParameters& params, int replicas) {
  const size_t n = params.entries().size();
  for (size_t i = 1; i < n; ++i)
    if (entry_start(params, i) < entry_start(params, i - 1))
      throw std::logic_error("a stage's parameter entries are not in arena order");
  const int64_t total = entry_start(params, n);
  std::vector<ShardRange> out;
  size_t first = 0;
  for (int r = 0; r < replicas; ++r) {
    size_t end = n;
    if (r + 1 < replicas) {
      const int64_t target = total * (r + 1) / replicas;
      end = first;
      while (end < n && entry_start(params, end + 1) <= target) ++end;
      // The tensor straddling the target goes to whichever side it is mostly on.
      if (end < n && target - entry_start(params, end) > entry_start(params, end + 1) - target)
        ++end;
    }
    ShardRange range;
    range.first_entry = first;
    range.end_entry = end;
    // The first range starts at 0 and the last ends at the arena's end: the ranges tile it.
    range.offset = r == 0 ? 0 : entry_start(params, first);
    range.count = (r + 1 == replicas ? total : entry_start(params, end)) - range.offset;
    out.push_back(range);
    first = end;
  }
  return out;
}

StageShard::StageShard(StageParameters& params, const Model& model, Communicator& group,
                       const OptimizerConfig& config, int stage)
    : params_(&params),
      group_(&group),
      stage_(stage),
      ranges_(plan_optimizer_shards(params, group.size())),
      optimizer_(config, params.backend(), range_table(params, ranges_[at(group.rank())])) {
  if (group.device_memory())
    throw UsageError(
        "--shard-optimizer exchanges gradients through host memory; its data-parallel group is a "
        "device-memory (NCCL) communicator");
  for (const ShardRange& r : ranges_) padded_ = std::max(padded_, r.count);
  if (static_cast<int64_t>(optimizer_.slots().empty()
                               ? mine().count
                               : optimizer_.slots()[0].state.flat().numel()) > mine().count)
    throw std::logic_error("a shard's optimizer state is larger than its range");
  for (const ParameterEntry& e : params.entries())
    tied_.push_back(model.tie_of({e.layer, e.param_index}) != nullptr);
}

size_t StageShard::state_bytes() const {
  size_t bytes = 0;
  for (const OptimizerSlot& s : optimizer_.slots()) bytes += s.state.bytes();
  return bytes;
}

Tensor StageShard::range_view(const Tensor& flat) const {
  const int64_t n =
      optimizer_.slots().empty() ? mine().count : optimizer_.slots()[0].state.flat().numel();
  // An empty range still takes the step (the optimizer counts its steps for AdamW).
  if (n == 0) return Tensor::borrow(nullptr, Shape{0});
  return flat.view(at(mine().offset) * sizeof(float), Shape{n}, DType::f32);
}

void StageShard::reduce_gradients() {
  if (padded_ == 0) return;  // a stage without parameters (the same on every replica)
  const Tensor flat = params_->grads_flat();
  params_->backend().synchronize();
  float* grads = host_floats(params_->backend(), flat, stage_buf_);
  const int R = group_->size();
  send_.assign(at(R * padded_), 0.f);
  for (int r = 0; r < R; ++r) {
    const ShardRange& range = ranges_[at(r)];
    std::copy_n(grads + range.offset, range.count, send_.begin() + r * padded_);
  }
  recv_.resize(at(padded_));
  group_->reduce_scatter(send_.data(), recv_.data(), padded_, ReduceOp::sum,
                         fmt::format("the gradient reduce-scatter of stage {}", stage_));
  std::copy_n(recv_.begin(), mine().count, grads + mine().offset);
  // Tied tensors whole, on every replica: sum_tied_gradients adds the copies across stages next.
  for (size_t i = 0; i < tied_.size(); ++i) {
    if (!tied_[i]) continue;
    const int64_t begin = entry_start(*params_, i);
    const int64_t n = params_->grad(i).numel();
    // The local gradient: the range's part was overwritten by the reduce-scatter above.
    int r = 0;
    while (i >= ranges_[at(r)].end_entry) ++r;
    float* g = grads + begin;
    std::copy_n(send_.begin() + r * padded_ + (begin - ranges_[at(r)].offset), n, g);
    group_->all_reduce(g, n, ElemType::f32, ReduceOp::sum,
                       fmt::format("the gradient all-reduce of tied tensor {} (stage {})",
                                   params_->entries()[i].name, stage_));
  }
  host_floats_done(params_->backend(), flat, stage_buf_);
}

void StageShard::add_squares(std::vector<double>& squares, size_t first_slot) {
  const size_t n = params_->entries().size();
  std::vector<double> mine_sq(n, 0.0);
  for (size_t i = mine().first_entry; i < mine().end_entry; ++i) {
    const Tensor g = params_->grad(i);
    if (g.numel() && !params_->entries()[i].tied_copy)
      mine_sq[i] = params_->backend().sum_squares(g.f32(), g.numel());
  }
  std::vector<double> all(n * at(group_->size()));
  if (n)
    group_->all_gather(mine_sq.data(), all.data(), n * sizeof(double),
                       fmt::format("the gradient-norm exchange of stage {}", stage_));
  for (int r = 0; r < group_->size(); ++r) {
    const ShardRange& range = ranges_[at(r)];
    for (size_t i = range.first_entry; i < range.end_entry; ++i)
      squares[first_slot + i] = all[at(r) * n + i];
  }
}

void StageShard::step(float factor, float lr) {
  const Tensor g = range_view(params_->grads_flat());
  if (factor != 1.f && g.numel()) params_->backend().scale(factor, g.f32(), g.numel());
  optimizer_.step(range_view(params_->params_flat()), g, lr);
}

void StageShard::gather_ranges(float* flat, const float* mine_data, std::string_view what) {
  const int R = group_->size();
  send_.assign(at(padded_), 0.f);
  std::copy_n(mine_data, std::min(mine().count, padded_), send_.begin());
  recv_.resize(at(R * padded_));
  group_->all_gather(send_.data(), recv_.data(), at(padded_) * sizeof(float), what);
  for (int r = 0; r < R; ++r) {
    const ShardRange& range = ranges_[at(r)];
    std::copy_n(recv_.begin() + r * padded_, range.count, flat + range.offset);
  }
}

void StageShard::gather_parameters() {
  if (padded_ == 0) return;
  const Tensor flat = params_->params_flat();
  params_->backend().synchronize();
  float* p = host_floats(params_->backend(), flat, stage_buf_);
  gather_ranges(p, p + mine().offset, fmt::format("the parameter all-gather of stage {}", stage_));
  host_floats_done(params_->backend(), flat, stage_buf_);
}

void StageShard::gather_state(Optimizer& full) {
  if (full.slots().size() != optimizer_.slots().size())
    throw std::logic_error("gather_state: the full optimizer has other slots");
  params_->backend().synchronize();
  for (size_t k = 0; k < full.slots().size(); ++k) {
    std::vector<float> part, whole;
    const Tensor shard = optimizer_.slots()[k].state.flat();
    const float* mine_data = host_floats(params_->backend(), shard, part);
    const Tensor dst = full.slots()[k].state.flat();
    float* out = host_floats(params_->backend(), dst, whole);
    if (padded_)
      gather_ranges(out, mine_data,
                    fmt::format("the gather of optimizer state '{}' of stage {} (checkpoint)",
                                optimizer_.slots()[k].name, stage_));
    host_floats_done(params_->backend(), dst, whole);
  }
  full.set_steps_taken(optimizer_.steps_taken());
}

void StageShard::take_state(const Optimizer& full) {
  if (full.slots().size() != optimizer_.slots().size())
    throw std::logic_error("take_state: the full optimizer has other slots");
  for (size_t k = 0; k < full.slots().size(); ++k) {
    const Tensor src = range_view(full.slots()[k].state.flat());
    const Tensor dst = optimizer_.slots()[k].state.flat();
    if (dst.numel()) params_->backend().copy_within(dst.data(), src.data(), dst.bytes());
  }
  params_->backend().synchronize();
  optimizer_.set_steps_taken(full.steps_taken());
}

double norm_of_squares(const Model& model, Communicator* pipeline_group, const FillSquares& fill,
                       Communicator* tensor_group) {
  // Index of each layer's first parameter tensor in the model's global order.
  std::vector<size_t> first_tensor(static_cast<size_t>(model.num_layers()) + 1, 0);
  for (int l = 0; l < model.num_layers(); ++l)
    first_tensor[static_cast<size_t>(l) + 1] =
        first_tensor[static_cast<size_t>(l)] + model.layer(l).param_specs().size();
  std::vector<double> squares(first_tensor.back(), 0.0);  // zeros for tensors held elsewhere
  fill(squares, first_tensor);
  // As global_grad_norm: each slot is non-zero on one process only, so the sum is exact.
  if (pipeline_group)
    pipeline_group->all_reduce(squares.data(), static_cast<int64_t>(squares.size()), ElemType::f64,
                               ReduceOp::sum, "the gradient-norm exchange between pipeline stages");
  if (tensor_group)
    tensor_group->all_reduce(squares.data(), static_cast<int64_t>(squares.size()), ElemType::f64,
                             ReduceOp::sum, "the gradient-norm exchange between tensor ranks");
  double sum = 0;
  for (double v : squares) sum += v;
  return std::sqrt(sum);
}

double sharded_grad_norm(const std::vector<StageShard*>& shards, const Model& model,
                         Communicator* pipeline_group) {
  return norm_of_squares(
      model, pipeline_group, [&](std::vector<double>& squares, const std::vector<size_t>& first) {
        for (StageShard* s : shards)
          s->add_squares(squares, first[static_cast<size_t>(s->params().first_layer())]);
      });
}

}  // namespace pt
