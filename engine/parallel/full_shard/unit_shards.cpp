#include "engine/parallel/full_shard/unit_shards.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/parallel/host_staging.h"

namespace pt {

namespace {

size_t at(int64_t i) { return static_cast<size_t>(i); }

bool holds_tie(const Model& model, int layer) {
  const size_t n = model.layer(layer).param_specs().size();
  for (size_t p = 0; p < n; ++p)
    if (model.tie_of({layer, p})) return true;
  return false;
}

// The size table of the window's entries, offsets from the window's start (the unit's layout).
SizeTable window_table(const StageParameters& p, const StageParameters::UnitWindow& w) {
  SizeTable t;
  for (size_t i = w.first_entry; i < w.end_entry; ++i) {
    const SizeTableEntry& e = p.layout().entries()[p.entries()[i].table_index];
    t.add(e.name, e.shape, e.dtype);
  }
  return t;
}

// Entry i's floats within its unit: [begin, end).
std::pair<int64_t, int64_t> entry_floats(const StageParameters& p, size_t i) {
  const StageParameters::UnitWindow& w = p.unit(p.unit_of_layer(p.entries()[i].layer));
  const SizeTableEntry& e = p.layout().entries()[p.entries()[i].table_index];
  const auto begin = static_cast<int64_t>((e.offset - w.offset) / sizeof(float));
  return {begin, begin + e.shape.numel()};
}

}  // namespace

std::vector<int> full_shard_units(const Model& model, int first, int last, int unit_layers) {
  if (unit_layers < 1)
    throw UsageError(fmt::format(
        "--shard-unit {} is not a number of layers: give 1 or more (layers with parameters per "
        "gathered unit)",
        unit_layers));
  std::vector<int> starts{first};
  int in_unit = 0;         // layers with parameters in the current unit
  bool unit_tied = false;  // the current unit holds a tied parameter
  for (int l = first; l < last; ++l) {
    if (model.layer(l).param_specs().empty()) continue;
    const bool tied = holds_tie(model, l);
    if (in_unit > 0 && (in_unit == unit_layers || tied || unit_tied)) {
      starts.push_back(l);
      in_unit = 0;
      unit_tied = false;
    }
    ++in_unit;
    unit_tied = unit_tied || tied;
  }
  return starts;
}

UnitShards::UnitShards(StageParameters& params, const Model& model, Communicator& group,
                       Communicator* replicate, const OptimizerConfig& config, int stage,
                       const FullShardConfig& shard)
    : params_(&params),
      model_(&model),
      group_(&group),
      replicate_(replicate),
      stage_(stage),
      config_(shard) {
  if (group.device_memory() || (replicate && replicate->device_memory()))
    throw UsageError(
        "--shard full exchanges parameters and gradients through host memory; its data-parallel "
        "group is a device-memory (NCCL) communicator");
  params.split_into_units(
      full_shard_units(model, params.first_layer(), params.last_layer(), shard.unit_layers));
  const int R = group.size();
  units_.resize(params.num_units());
  for (size_t u = 0; u < units_.size(); ++u) {
    const StageParameters::UnitWindow& w = params.unit(u);
    Unit& unit = units_[u];
    unit.floats = static_cast<int64_t>(w.bytes / sizeof(float));
    if (unit.floats == 0) continue;
    bool tied = false;
    for (int l = w.first_layer; l < w.last_layer; ++l) tied = tied || holds_tie(model, l);
    if (tied) {
      unit.kind = Kind::whole;
      unit.optimizer =
          std::make_unique<Optimizer>(config, params.backend(), window_table(params, w));
      continue;
    }
    unit.kind = Kind::sharded;
    unit.part = (unit.floats + R - 1) / R;
    unit.slot = parts_table_.add(fmt::format("unit{}", u), Shape{unit.part});
  }
  if (!parts_table_.entries().empty()) {
    part_params_ = Arena(params.backend(), parts_table_);
    part_grads_ = Arena(params.backend(), parts_table_);
    optimizer_ = std::make_unique<Optimizer>(config, params.backend(), parts_table_);
  }
  // The initial values (every unit whole after the split) into the parts; the wholes dropped.
  take_params();
  for (size_t u = 0; u < units_.size(); ++u)
    if (sharded(u)) params.release_unit_grads(u);
}

int64_t UnitShards::part_begin(const Unit& unit) const {
  return std::min(unit.floats, unit.part * group_->rank());
}

int64_t UnitShards::part_end(const Unit& unit) const {
  return std::min(unit.floats, unit.part * (group_->rank() + 1));
}

std::string UnitShards::what(std::string_view action, size_t u) const {
  const StageParameters::UnitWindow& w = params_->unit(u);
  return fmt::format("the {} of stage {}'s unit {} (layers [{}, {}))", action, stage_, u,
                     w.first_layer, w.last_layer);
}

void UnitShards::count_gathered() {
  size_t bytes = 0;
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!sharded(u)) continue;
    if (params_->unit_params_resident(u)) bytes += params_->unit(u).bytes;
    if (params_->unit_grads_resident(u)) bytes += params_->unit(u).bytes;
  }
  peak_gathered_ = std::max(peak_gathered_, bytes);
}

void UnitShards::gather(size_t u) {
  if (params_->unit_params_resident(u)) return;
  fill(u, materialize(u));
}

Tensor UnitShards::materialize(size_t u) {
  if (params_->unit_params_resident(u)) return {};
  params_->materialize_unit_params(u);
  count_gathered();
  params_->backend().synchronize();  // the parts are written by the last step's update
  return params_->unit_params_flat(u);
}

void UnitShards::fill(size_t u, const Tensor& whole) {
  const Unit& unit = units_.at(u);
  if (unit.kind != Kind::sharded || !whole.defined()) return;
  const int R = group_->size();
  const float* mine = host_floats(params_->backend(), part_params_.view(unit.slot), gather_stage_);
  gather_recv_.resize(at(R * unit.part));
  group_->all_gather(mine, gather_recv_.data(), at(unit.part) * sizeof(float),
                     what("parameter all-gather", u));
  if (params_->backend().host_accessible()) {
    std::copy_n(gather_recv_.begin(), unit.floats, whole.f32());
  } else {
    params_->backend().copy_from_host(whole.data(), gather_recv_.data(), whole.bytes());
  }
}

void UnitShards::make_gradients(size_t u) {
  if (params_->unit_grads_resident(u)) return;
  params_->materialize_unit_grads(u);
  count_gathered();
}

void UnitShards::release(size_t u) {
  if (sharded(u)) params_->release_unit_params(u);
}

void UnitShards::release_all() {
  for (size_t u = 0; u < units_.size(); ++u) release(u);
}

void UnitShards::reduce(size_t u) {
  if (units_.at(u).kind == Kind::empty) return;
  const Tensor grads = reduce_source(u);
  reduce_parts(u, grads, accumulates(u));
  finish_reduce(u);
}

Tensor UnitShards::reduce_source(size_t u) const {
  if (units_.at(u).kind == Kind::empty) return {};
  if (!params_->unit_grads_resident(u))
    throw std::logic_error(what("reduction (no gradients were computed)", u));
  params_->backend().synchronize();  // the weight gradients are written
  return params_->unit_grads_flat(u);
}

void UnitShards::reduce_parts(size_t u, const Tensor& flat, bool accumulate) {
  const Unit& unit = units_.at(u);
  if (unit.kind == Kind::empty) return;
  float* grads = host_floats(params_->backend(), flat, stage_buf_);
  if (unit.kind == Kind::whole) {
    group_->all_reduce(grads, unit.floats, ElemType::f32, ReduceOp::sum,
                       what("gradient all-reduce", u));
    if (replicate_)
      replicate_->all_reduce(grads, unit.floats, ElemType::f32, ReduceOp::sum,
                             what("gradient all-reduce across shard groups", u));
    host_floats_done(params_->backend(), flat, stage_buf_);
    return;
  }
  const int R = group_->size();
  send_.assign(at(R * unit.part), 0.f);
  std::copy_n(grads, unit.floats, send_.begin());
  recv_.resize(at(unit.part));
  group_->reduce_scatter(send_.data(), recv_.data(), unit.part, ReduceOp::sum,
                         what("gradient reduce-scatter", u));
  if (replicate_)
    replicate_->all_reduce(recv_.data(), unit.part, ElemType::f32, ReduceOp::sum,
                           what("gradient all-reduce of the part across shard groups", u));
  const Tensor part = part_grads_.view(unit.slot);
  float* dst = host_floats(params_->backend(), part, part_stage_);
  if (accumulate) {
    for (size_t i = 0; i < recv_.size(); ++i) dst[i] += recv_[i];
  } else {
    std::copy(recv_.begin(), recv_.end(), dst);
  }
  host_floats_done(params_->backend(), part, part_stage_);
}

void UnitShards::finish_reduce(size_t u) {
  Unit& unit = units_.at(u);
  if (unit.kind == Kind::sharded) params_->release_unit_grads(u);
}

void UnitShards::start_step() {
  if (optimizer_) {
    const Tensor g = part_grads_.flat();
    params_->backend().fill(g.f32(), 0.f, g.numel());
  }
  for (Unit& unit : units_) unit.reductions = 0;
  peak_gathered_ = 0;
  count_gathered();
}

void UnitShards::add_squares(std::vector<double>& squares, size_t first_slot,
                             bool counts_replicas) {
  const std::vector<ParameterEntry>& entries = params_->entries();
  std::vector<double> partial(entries.size(), 0.0);
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].tied_copy) continue;
    const ParameterEntry& e = entries[i];
    if (!counts_replicas && !model_->layer(e.layer).param_specs()[e.param_index].shard.split())
      continue;
    const size_t u = params_->unit_of_layer(entries[i].layer);
    const Unit& unit = units_[u];
    if (unit.kind == Kind::whole) {
      // Every replica holds the same sum; replica 0 alone contributes it (x + 0 = x exactly).
      if (group_->rank() == 0) {
        const Tensor g = params_->grad(i);
        partial[i] = params_->backend().sum_squares(g.f32(), g.numel());
      }
    } else if (unit.kind == Kind::sharded) {
      const auto [begin, end] = entry_floats(*params_, i);
      const int64_t lo = std::max(begin, part_begin(unit)), hi = std::min(end, part_end(unit));
      if (lo < hi) {
        const Tensor part = part_grads_.view(unit.slot);
        partial[i] = params_->backend().sum_squares(part.f32() + (lo - part_begin(unit)), hi - lo);
      }
    }
  }
  if (!partial.empty())
    group_->all_reduce(partial.data(), static_cast<int64_t>(partial.size()), ElemType::f64,
                       ReduceOp::sum,
                       fmt::format("the gradient-norm exchange of stage {}", stage_));
  std::copy(partial.begin(), partial.end(), squares.begin() + static_cast<ptrdiff_t>(first_slot));
}

void UnitShards::step(float factor, float lr) {
  Backend& be = params_->backend();
  if (optimizer_) {
    const Tensor g = part_grads_.flat();
    if (factor != 1.f) be.scale(factor, g.f32(), g.numel());
    optimizer_->step(part_params_.flat(), g, lr);
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    Unit& unit = units_[u];
    if (unit.kind != Kind::whole) continue;
    const Tensor g = params_->unit_grads_flat(u);
    if (factor != 1.f) be.scale(factor, g.f32(), g.numel());
    unit.optimizer->step(params_->unit_params_flat(u), g, lr);
  }
  release_all();
}

void UnitShards::gather_all() {
  for (size_t u = 0; u < units_.size(); ++u)
    if (sharded(u)) gather(u);
}

void UnitShards::materialize_all() {
  for (size_t u = 0; u < units_.size(); ++u) {
    if (params_->unit_params_resident(u)) continue;
    params_->materialize_unit_params(u);
    // A load writes the tensors, not the padding between them: zeros there, as in every arena.
    const Tensor whole = params_->unit_params_flat(u);
    if (whole.numel()) params_->backend().fill(whole.f32(), 0.f, whole.numel());
  }
}

void UnitShards::take_params() {
  Backend& be = params_->backend();
  be.synchronize();
  for (size_t u = 0; u < units_.size(); ++u) {
    const Unit& unit = units_[u];
    if (unit.kind != Kind::sharded || !params_->unit_params_resident(u)) continue;
    const Tensor part = part_params_.view(unit.slot);
    const int64_t n = part_end(unit) - part_begin(unit);
    be.fill(part.f32(), 0.f, part.numel());
    if (n > 0)
      be.copy_within(part.data(), params_->unit_params_flat(u).f32() + part_begin(unit),
                     at(n) * sizeof(float));
    params_->release_unit_params(u);
  }
  be.synchronize();
}

void UnitShards::gather_state(Optimizer& full) {
  Backend& be = params_->backend();
  be.synchronize();
  const int R = group_->size();
  for (size_t k = 0; k < full.slots().size(); ++k) {
    const Tensor dst = full.slots()[k].state.flat();
    std::vector<float> whole;
    float* out = host_floats(params_->backend(), dst, whole);
    for (size_t u = 0; u < units_.size(); ++u) {
      const Unit& unit = units_[u];
      float* window = out + params_->unit(u).offset / sizeof(float);
      if (unit.kind == Kind::whole) {
        const Tensor src = unit.optimizer->slots()[k].state.flat();
        std::vector<float> copy;
        std::copy_n(host_floats(params_->backend(), src, copy), unit.floats, window);
      } else if (unit.kind == Kind::sharded) {
        std::vector<float> copy;
        const Tensor part = optimizer_->slots()[k].state.view(unit.slot);
        const float* mine = host_floats(params_->backend(), part, copy);
        recv_.resize(at(R * unit.part));
        group_->all_gather(
            mine, recv_.data(), at(unit.part) * sizeof(float),
            what(fmt::format("gather of optimizer state '{}' (checkpoint)", full.slots()[k].name),
                 u));
        std::copy_n(recv_.begin(), unit.floats, window);
      }
    }
    host_floats_done(params_->backend(), dst, whole);
  }
  full.set_steps_taken(optimizer_ ? optimizer_->steps_taken() : full.steps_taken());
  for (const Unit& unit : units_)
    if (unit.optimizer) full.set_steps_taken(unit.optimizer->steps_taken());
}

void UnitShards::take_state(const Optimizer& full) {
  Backend& be = params_->backend();
  for (size_t k = 0; k < full.slots().size(); ++k) {
    const Tensor src = full.slots()[k].state.flat();
    for (size_t u = 0; u < units_.size(); ++u) {
      const Unit& unit = units_[u];
      const int64_t window = static_cast<int64_t>(params_->unit(u).offset / sizeof(float));
      if (unit.kind == Kind::whole) {
        const Tensor dst = unit.optimizer->slots()[k].state.flat();
        be.copy_within(dst.data(), src.f32() + window, dst.bytes());
      } else if (unit.kind == Kind::sharded) {
        const Tensor dst = optimizer_->slots()[k].state.view(unit.slot);
        const int64_t n = part_end(unit) - part_begin(unit);
        be.fill(dst.f32(), 0.f, dst.numel());
        if (n > 0)
          be.copy_within(dst.data(), src.f32() + window + part_begin(unit), at(n) * sizeof(float));
      }
    }
  }
  be.synchronize();
  if (optimizer_) optimizer_->set_steps_taken(full.steps_taken());
  for (Unit& unit : units_)
    if (unit.optimizer) unit.optimizer->set_steps_taken(full.steps_taken());
}

size_t UnitShards::held_parameter_bytes() const {
  size_t bytes = part_params_.bytes();
  for (size_t u = 0; u < units_.size(); ++u)
    if (units_[u].kind == Kind::whole) bytes += params_->unit(u).bytes;
  return bytes;
}

size_t UnitShards::held_gradient_bytes() const {
  size_t bytes = part_grads_.bytes();
  for (size_t u = 0; u < units_.size(); ++u)
    if (units_[u].kind == Kind::whole) bytes += params_->unit(u).bytes;
  return bytes;
}

size_t UnitShards::optimizer_state_bytes() const {
  size_t bytes = 0;
  const auto add = [&](const Optimizer& o) {
    for (const OptimizerSlot& s : o.slots()) bytes += s.state.bytes();
  };
  if (optimizer_) add(*optimizer_);
  for (const Unit& unit : units_)
    if (unit.optimizer) add(*unit.optimizer);
  return bytes;
}

}  // namespace pt
