#include "engine/parallel/whole_stages.h"

#include <span>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "layers/tensor_parallel/param_slices.h"

namespace pt {

namespace {

// The tensors of one kind of a stage: 0 the parameters, k >= 1 the optimizer's slot k - 1.
int kinds(const StageState& s) {
  return 1 + (s.optimizer ? static_cast<int>(s.optimizer->slots().size()) : 0);
}

Tensor tensor_of(const StageState& s, int kind, size_t entry) {
  if (kind == 0) return s.params->param(entry);
  const OptimizerSlot& slot = s.optimizer->slots()[static_cast<size_t>(kind - 1)];
  return slot.state.view(s.params->entries()[entry].table_index);
}

Tensor flat_of(const StageState& s, int kind) {
  return kind == 0 ? s.params->params_flat()
                   : s.optimizer->slots()[static_cast<size_t>(kind - 1)].state.flat();
}

std::vector<float> to_host(const StageParameters& p, const Tensor& t) {
  std::vector<float> host(static_cast<size_t>(t.numel()));
  if (t.bytes()) p.backend().copy_to_host(host.data(), t.data(), t.bytes());
  return host;
}

// A stage's arena of `kind` as host floats in its layout: a stage split into units (full
// sharding, every unit whole) has no one arena, so each unit goes to its window.
std::vector<float> arena_to_host(const StageState& s, int kind) {
  const StageParameters& p = *s.params;
  if (kind != 0 || !p.split()) return to_host(p, flat_of(s, kind));
  std::vector<float> host(p.layout().total_bytes() / sizeof(float), 0.f);
  for (size_t u = 0; u < p.num_units(); ++u)
    if (const StageParameters::UnitWindow& w = p.unit(u); w.bytes)
      p.backend().copy_to_host(host.data() + w.offset / sizeof(float), p.unit_params_flat(u).data(),
                               w.bytes);
  return host;
}

ParamShard shard_of(const Model& model, const ParameterEntry& e) {
  return model.layer(e.layer).param_specs()[e.param_index].shard;
}

// whole := the slices of every rank (slices[t] from rank t, shaped as `mine` says with rank t);
// a replicated tensor is rank 0's.
void assemble(const ParamShard& mine, const std::vector<std::span<const float>>& slices,
              std::span<float> whole) {
  if (!mine.split()) {
    std::copy(slices[0].begin(), slices[0].end(), whole.begin());
    return;
  }
  for (size_t t = 0; t < slices.size(); ++t) {
    ParamShard rank = mine;
    rank.rank = static_cast<int>(t);
    put_slice(slices[t], rank, whole);
  }
}

void check_alike(const std::vector<StageState>& a, const StageParameters& whole, size_t k) {
  if (k >= a.size() || a[k].params->entries().size() != whole.entries().size())
    throw std::logic_error("whole stages: a tensor rank holds other stages than rank 0");
}

}  // namespace

WholeStages::WholeStages(std::unique_ptr<Model> whole, const std::vector<StageState>& like,
                         uint64_t seed, const OptimizerConfig* optimizer)
    : whole_(std::move(whole)) {
  for (const StageState& s : like) {
    params_.push_back(std::make_unique<StageParameters>(
        *whole_, s.params->first_layer(), s.params->last_layer(), s.params->backend(), seed));
    const OptimizerConfig* config = optimizer     ? optimizer
                                    : s.optimizer ? &s.optimizer->config()
                                                  : nullptr;
    optimizers_.push_back(
        config ? std::make_unique<Optimizer>(*config, s.params->backend(), params_.back()->layout())
               : nullptr);
  }
}

WholeStages::~WholeStages() {
  optimizers_.clear();
  params_.clear();  // unbinds the whole model's layers before the model goes
}

std::vector<StageState> WholeStages::states() {
  std::vector<StageState> out;
  for (size_t k = 0; k < params_.size(); ++k)
    out.push_back({params_[k].get(), optimizers_[k].get()});
  return out;
}

void WholeStages::fill_whole(size_t k, int kind, const StageState& mine, const Model& model,
                             const std::vector<std::span<const float>>& flats) {
  const StageState whole{params_[k].get(), optimizers_[k].get()};
  const SizeTable& table = mine.params->layout();
  for (size_t e = 0; e < whole.params->entries().size(); ++e) {
    const ParameterEntry& entry = mine.params->entries()[e];
    const SizeTableEntry& at = table.entries()[entry.table_index];
    std::vector<std::span<const float>> slices;
    for (const auto& flat : flats)
      slices.push_back(
          flat.subspan(at.offset / sizeof(float), static_cast<size_t>(at.shape.numel())));
    const Tensor target = tensor_of(whole, kind, e);
    std::vector<float> out(static_cast<size_t>(target.numel()));
    assemble(shard_of(model, entry), slices, out);
    if (target.bytes())
      whole.params->backend().copy_from_host(target.data(), out.data(), target.bytes());
  }
  if (kind == 0 && whole.optimizer && mine.optimizer)
    whole.optimizer->set_steps_taken(mine.optimizer->steps_taken());
}

void WholeStages::gather(const std::vector<std::vector<StageState>>& ranks,
                         const std::vector<const Model*>& models) {
  for (size_t k = 0; k < params_.size(); ++k) {
    for (const auto& r : ranks) check_alike(r, *params_[k], k);
    for (int kind = 0; kind < kinds(ranks[0][k]); ++kind) {
      // Each rank's arena of this kind to the host once (equal layouts: equal slices).
      std::vector<std::vector<float>> host;
      for (const auto& r : ranks) host.push_back(arena_to_host(r[k], kind));
      fill_whole(k, kind, ranks[0][k], *models[0],
                 std::vector<std::span<const float>>(host.begin(), host.end()));
    }
  }
}

void WholeStages::gather(const std::vector<StageState>& mine, const Model& model,
                         Communicator& tensor_group) {
  const auto T = static_cast<size_t>(tensor_group.size());
  for (size_t k = 0; k < params_.size(); ++k) {
    check_alike(mine, *params_[k], k);
    for (int kind = 0; kind < kinds(mine[k]); ++kind) {
      // Every rank's arena has the same layout (equal slices): one all-gather of the flat bytes.
      const std::vector<float> flat = arena_to_host(mine[k], kind);
      std::vector<float> all(flat.size() * T);
      tensor_group.all_gather(flat.data(), all.data(), flat.size() * sizeof(float),
                              "gathering tensor-parallel slices for a checkpoint");
      std::vector<std::span<const float>> flats;
      for (size_t t = 0; t < T; ++t) flats.emplace_back(all.data() + t * flat.size(), flat.size());
      fill_whole(k, kind, mine[k], model, flats);
    }
  }
}

void WholeStages::scatter(const std::vector<std::vector<StageState>>& ranks,
                          const std::vector<const Model*>& models) const {
  for (size_t k = 0; k < params_.size(); ++k) {
    const StageState whole{params_[k].get(), optimizers_[k].get()};
    for (const auto& r : ranks) check_alike(r, *params_[k], k);
    for (int kind = 0; kind < kinds(ranks[0][k]); ++kind)
      for (size_t e = 0; e < whole.params->entries().size(); ++e) {
        // The whole tensor to the host once, then every rank's slice of it.
        const std::vector<float> w = to_host(*whole.params, tensor_of(whole, kind, e));
        for (size_t t = 0; t < ranks.size(); ++t) {
          const StageState& r = ranks[t][k];
          const Tensor target = tensor_of(r, kind, e);
          const ParamShard shard = shard_of(*models[t], r.params->entries()[e]);
          std::vector<float> slice(static_cast<size_t>(target.numel()));
          if (shard.split())
            take_slice(w, shard, slice);
          else
            slice = w;
          if (target.bytes())
            r.params->backend().copy_from_host(target.data(), slice.data(), target.bytes());
        }
      }
    for (const auto& r : ranks)
      if (r[k].optimizer && whole.optimizer)
        r[k].optimizer->set_steps_taken(whole.optimizer->steps_taken());
  }
}

}  // namespace pt
