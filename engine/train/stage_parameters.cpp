#include "engine/train/stage_parameters.h"

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/core/random.h"
#include "layers/tensor_parallel/param_slices.h"

namespace pt {

void initial_values(const ParamInit& init, uint64_t seed, int layer_index, size_t param_index,
                    float* out, int64_t n) {
  CounterRng rng(hash_keys(hash_keys(seed, static_cast<uint64_t>(layer_index)), param_index));
  switch (init.kind) {
    case ParamInit::Kind::zeros:
      for (int64_t i = 0; i < n; ++i) out[i] = 0.f;
      break;
    case ParamInit::Kind::ones:
      for (int64_t i = 0; i < n; ++i) out[i] = 1.f;
      break;
    case ParamInit::Kind::uniform:
      for (int64_t i = 0; i < n; ++i)
        out[i] = static_cast<float>((2.0 * rng.next_double() - 1.0) * init.a);
      break;
    case ParamInit::Kind::normal:
      // Box-Muller; 1 - u keeps the logarithm finite.
      for (int64_t i = 0; i < n; ++i) {
        const double u1 = 1.0 - rng.next_double(), u2 = rng.next_double();
        out[i] = static_cast<float>(init.a * std::sqrt(-2.0 * std::log(u1)) *
                                    std::cos(2.0 * std::numbers::pi * u2));
      }
      break;
  }
}

StageParameters::StageParameters(const Model& model, int first_layer, int last_layer,
                                 Backend& backend, uint64_t seed)
    : model_(&model), first_(first_layer), last_(last_layer), backend_(&backend) {
  if (first_layer < 0 || last_layer > model.num_layers() || first_layer >= last_layer)
    throw UsageError(fmt::format("stage layer range [{}, {}) is not inside the model's {} layers",
                                 first_layer, last_layer, model.num_layers()));
  SizeTable table;
  for (int l = first_; l < last_; ++l) {
    const Layer& layer = model.layer(l);
    const auto specs = layer.param_specs();
    for (size_t p = 0; p < specs.size(); ++p) {
      const std::string name = parameter_name(l, layer, specs[p].name);
      const ParameterTie* tie = model.tie_of({l, p});
      const bool copy = tie && tie->members[0] != ParamRef{l, p};
      entries_.push_back({l, name, table.add(name, specs[p].shape), p, copy});
    }
  }
  table_ = table;
  params_ = Arena(backend, table);
  grads_ = Arena(backend, table);
  unwritten_.assign(static_cast<size_t>(last_ - first_), true);  // as after start_gradients()

  // Initialise on the host, then copy: the values do not depend on the device.
  std::vector<float> host, whole;
  size_t e = 0;
  for (int l = first_; l < last_; ++l) {
    Layer& layer = model.layer(l);
    const auto specs = layer.param_specs();
    std::vector<Tensor> params, grads;
    for (size_t p = 0; p < specs.size(); ++p, ++e) {
      Tensor t = param(e);
      host.resize(static_cast<size_t>(t.numel()));
      // A tied copy starts as its owner does: same init, same key, same values.
      const ParameterTie* tie = model.tie_of({l, p});
      const ParamRef from = tie ? tie->members[0] : ParamRef{l, p};
      const ParamInit init =
          tie ? model.layer(from.layer).param_specs()[from.param].init : specs[p].init;
      // A tensor-parallel slice: the whole parameter's values, then this rank's part, so a
      // model starts the same at any T.
      if (const ParamShard& shard = specs[p].shard; shard.split()) {
        whole.resize(static_cast<size_t>(shard.whole.numel()));
        initial_values(init, seed, from.layer, from.param, whole.data(), shard.whole.numel());
        take_slice(whole, shard, host);
      } else {
        initial_values(init, seed, from.layer, from.param, host.data(), t.numel());
      }
      backend.copy_from_host(t.data(), host.data(), t.bytes());
      params.push_back(t);
      grads.push_back(grad(e));
    }
    layer.bind(params, grads);
  }
}

StageParameters::~StageParameters() {
  size_t e = 0;
  for (int l = first_; l < last_; ++l) {
    Layer& layer = model_->layer(l);
    const size_t n = layer.param_specs().size();
    // Someone may have bound the layer elsewhere since (e.g. a profiler): leave that alone. A
    // split stage binds its layers to its units or to placeholders, all of them its own.
    if (n > 0 && !layer.params().empty() &&
        (split() || layer.params()[0].data() == param(e).data() ||
         (has_stash_ && layer.params()[0].data() == stash(e).data())))
      layer.unbind();
    e += n;
  }
}

Tensor StageParameters::param(size_t i) const {
  if (!split()) return params_.view(entries_[i].table_index);
  const Unit& u = units_[entry_unit_.at(i)];
  if (!u.params_resident)
    throw std::logic_error(fmt::format(
        "parameter {} is read while its unit (layers [{}, {})) is sharded: gather it first",
        entries_[i].name, u.window.first_layer, u.window.last_layer));
  return u.params.view(i - u.window.first_entry);
}

Tensor StageParameters::grad(size_t i) const {
  if (!split()) return grads_.view(entries_[i].table_index);
  const Unit& u = units_[entry_unit_.at(i)];
  if (!u.grads_resident)
    throw std::logic_error(fmt::format(
        "the gradient of {} is read while its unit (layers [{}, {})) holds none: it was "
        "reduce-scattered to the shards",
        entries_[i].name, u.window.first_layer, u.window.last_layer));
  return u.grads.view(i - u.window.first_entry);
}

Tensor StageParameters::params_flat() const {
  if (split())
    throw std::logic_error("params_flat: a stage split into units (--shard full) has no one arena");
  return params_.flat();
}

Tensor StageParameters::grads_flat() const {
  if (split())
    throw std::logic_error("grads_flat: a stage split into units (--shard full) has no one arena");
  return grads_.flat();
}

void StageParameters::split_into_units(const std::vector<int>& first_layers) {
  if (split() || has_stash_)
    throw std::logic_error("split_into_units: the stage is already split or keeps a stash");
  if (first_layers.empty() || first_layers[0] != first_)
    throw std::logic_error("split_into_units: the first unit must start at the stage's start");
  const auto entry_start = [&](size_t e) {
    return e == entries_.size() ? table_.total_bytes()
                                : table_.entries()[entries_[e].table_index].offset;
  };
  entry_unit_.assign(entries_.size(), 0);
  size_t e = 0;
  for (size_t u = 0; u < first_layers.size(); ++u) {
    Unit unit;
    UnitWindow& w = unit.window;
    w.first_layer = first_layers[u];
    w.last_layer = u + 1 < first_layers.size() ? first_layers[u + 1] : last_;
    if (w.last_layer <= w.first_layer || w.last_layer > last_)
      throw std::logic_error("split_into_units: units must be non-empty and in order");
    w.first_entry = e;
    while (e < entries_.size() && entries_[e].layer < w.last_layer) entry_unit_[e++] = u;
    w.end_entry = e;
    w.offset = entry_start(w.first_entry);
    w.bytes = entry_start(w.end_entry) - w.offset;
    for (size_t i = w.first_entry; i < w.end_entry; ++i) {
      const SizeTableEntry& t = table_.entries()[entries_[i].table_index];
      unit.table.add(t.name, t.shape, t.dtype);
      if (unit.table.entries().back().offset != t.offset - w.offset)
        throw std::logic_error("split_into_units: a unit's layout differs from the stage's");
    }
    if (w.bytes) {
      unit.params = Arena(*backend_, unit.table);
      unit.grads = Arena(*backend_, unit.table);
      backend_->copy_within(unit.params.flat().data(),
                            static_cast<const char*>(params_.flat().data()) + w.offset, w.bytes);
      backend_->copy_within(unit.grads.flat().data(),
                            static_cast<const char*>(grads_.flat().data()) + w.offset, w.bytes);
    }
    units_.push_back(std::move(unit));
  }
  backend_->synchronize();
  params_ = Arena();
  grads_ = Arena();
  for (size_t u = 0; u < units_.size(); ++u) bind_unit(u);
}

size_t StageParameters::unit_of_layer(int layer) const {
  for (size_t u = 0; u < units_.size(); ++u)
    if (layer < units_[u].window.last_layer) return u;
  throw std::logic_error(
      fmt::format("unit_of_layer: layer {} is not in a unit of this stage", layer));
}

bool StageParameters::unit_params_resident(size_t u) const { return units_.at(u).params_resident; }
bool StageParameters::unit_grads_resident(size_t u) const { return units_.at(u).grads_resident; }

Tensor StageParameters::unit_params_flat(size_t u) const {
  if (!unit_params_resident(u)) throw std::logic_error("unit_params_flat: the unit is sharded");
  return units_[u].params.flat();
}

Tensor StageParameters::unit_grads_flat(size_t u) const {
  if (!unit_grads_resident(u)) throw std::logic_error("unit_grads_flat: the unit holds none");
  return units_[u].grads.flat();
}

void StageParameters::bind_unit(size_t u) {
  const Unit& unit = units_[u];
  size_t e = unit.window.first_entry;
  for (int l = unit.window.first_layer; l < unit.window.last_layer; ++l) {
    Layer& layer = model_->layer(l);
    const size_t n = layer.param_specs().size();
    if (n == 0) continue;
    std::vector<Tensor> params, grads;
    for (size_t k = 0; k < n; ++k, ++e) {
      const size_t local = e - unit.window.first_entry;
      const Shape& shape = unit.table.entries()[local].shape;
      // A placeholder has the shape and no memory: a layer that used it would fail loudly.
      params.push_back(unit.params_resident ? unit.params.view(local)
                                            : Tensor::borrow(nullptr, shape));
      grads.push_back(unit.grads_resident ? unit.grads.view(local)
                                          : Tensor::borrow(nullptr, shape));
    }
    layer.bind(params, grads);
  }
}

void StageParameters::materialize_unit_params(size_t u) {
  Unit& unit = units_.at(u);
  if (unit.params_resident) return;
  // Not zeroed: the caller writes every byte (a gather of the parts, padding included).
  if (unit.window.bytes) unit.params = Arena(*backend_, unit.table, /*zeroed=*/false);
  unit.params_resident = true;
  bind_unit(u);
}

void StageParameters::release_unit_params(size_t u) {
  Unit& unit = units_.at(u);
  if (!unit.params_resident || unit.window.bytes == 0) return;
  unit.params_resident = false;
  bind_unit(u);  // before the arena goes: the layers' views would keep it alive
  unit.params = Arena();
}

void StageParameters::materialize_unit_grads(size_t u) {
  Unit& unit = units_.at(u);
  if (unit.grads_resident) return;
  if (unit.window.bytes) unit.grads = Arena(*backend_, unit.table);
  unit.grads_resident = true;
  bind_unit(u);
}

void StageParameters::release_unit_grads(size_t u) {
  Unit& unit = units_.at(u);
  if (!unit.grads_resident || unit.window.bytes == 0) return;
  unit.grads_resident = false;
  bind_unit(u);
  unit.grads = Arena();
}

int64_t StageParameters::param_count() const {
  int64_t n = 0;
  for (size_t i = 0; i < entries_.size(); ++i) n += param(i).numel();
  return n;
}

void StageParameters::add_stash() {
  if (has_stash_) return;
  if (split()) throw std::logic_error("add_stash: a stage split into units keeps no stash");
  stash_ = Arena(*backend_, params_.table());
  has_stash_ = true;
  const Tensor from = params_flat();
  if (from.numel()) backend_->copy_within(stash_.flat().data(), from.data(), stash_.bytes());
}

void StageParameters::swap_stash() {
  if (!has_stash_) throw std::logic_error("StageParameters::swap_stash: the stage keeps no stash");
  std::swap(params_, stash_);
}

void StageParameters::zero_grads() {
  if (split()) {
    for (size_t u = 0; u < units_.size(); ++u)
      if (units_[u].grads_resident && units_[u].window.bytes) {
        const Tensor g = units_[u].grads.flat();
        backend_->fill(g.f32(), 0.f, g.numel());
      }
  } else if (Tensor g = grads_flat(); g.numel()) {
    backend_->fill(g.f32(), 0.f, g.numel());
  }
  unwritten_.assign(unwritten_.size(), false);
}

void StageParameters::start_gradients() { unwritten_.assign(unwritten_.size(), true); }

bool StageParameters::take_unwritten(int layer) {
  if (layer < first_ || layer >= last_)
    throw std::logic_error(
        fmt::format("layer {} is not in the stage's layers [{}, {})", layer, first_, last_));
  const auto i = static_cast<size_t>(layer - first_);
  const bool unwritten = unwritten_[i];
  unwritten_[i] = false;
  return unwritten;
}

void StageParameters::finish_gradients() {
  for (size_t e = 0; e < entries_.size(); ++e) {
    if (!unwritten_[static_cast<size_t>(entries_[e].layer - first_)]) continue;
    // A split stage's unit without gradients here: they were reduce-scattered, or never made.
    if (split() && !units_[entry_unit_[e]].grads_resident) continue;
    const Tensor g = grad(e);
    if (g.numel()) backend_->fill(g.f32(), 0.f, g.numel());
  }
  unwritten_.assign(unwritten_.size(), false);
}

}  // namespace pt
