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
    // Someone may have bound the layer elsewhere since (e.g. a profiler): leave that alone.
    if (n > 0 && !layer.params().empty() &&
        (layer.params()[0].data() == param(e).data() ||
         (has_stash_ && layer.params()[0].data() == stash(e).data())))
      layer.unbind();
    e += n;
  }
}

int64_t StageParameters::param_count() const {
  int64_t n = 0;
  for (size_t i = 0; i < entries_.size(); ++i) n += param(i).numel();
  return n;
}

void StageParameters::add_stash() {
  if (has_stash_) return;
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
  Tensor g = grads_flat();
  if (g.numel()) backend_->fill(g.f32(), 0.f, g.numel());
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
    const Tensor g = grad(e);
    if (g.numel()) backend_->fill(g.f32(), 0.f, g.numel());
  }
  unwritten_.assign(unwritten_.size(), false);
}

}  // namespace pt
