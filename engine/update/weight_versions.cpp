#include "engine/update/weight_versions.h"

#include <stdexcept>
#include <vector>

#include <fmt/format.h>

namespace pt {

WeightVersions::WeightVersions(Model& model, StageParameters& params, int64_t latest,
                               bool keep_previous)
    : model_(&model), params_(&params), latest_(latest) {
  if (keep_previous) params.add_stash();
}

void WeightVersions::bind_arena(bool previous) {
  const auto& entries = params_->entries();
  size_t e = 0;
  for (int l = params_->first_layer(); l < params_->last_layer(); ++l) {
    std::vector<Tensor> params, grads;
    for (; e < entries.size() && entries[e].layer == l; ++e) {
      params.push_back(previous ? params_->stash(e) : params_->param(e));
      grads.push_back(params_->grad(e));
    }
    if (!params.empty()) model_->layer(l).bind(params, grads);
  }
  bound_previous_ = previous;
}

void WeightVersions::bind(int64_t version) {
  if (!params_->has_stash() && version != latest_)
    throw std::logic_error(fmt::format(
        "layers {}..{} need weight version {} but hold only {} (no previous version kept): the "
        "schedule runs a micro-batch of this stage after its step's update",
        params_->first_layer(), params_->last_layer() - 1, version, latest_));
  if (version != latest_ && version != latest_ - 1)
    throw std::logic_error(fmt::format(
        "layers {}..{} need weight version {} but hold only {} and {}: the schedule runs a "
        "micro-batch more than one update after its step",
        params_->first_layer(), params_->last_layer() - 1, version, latest_ - 1, latest_));
  const bool previous = version != latest_;
  if (previous != bound_previous_) bind_arena(previous);
}

void WeightVersions::update(Optimizer& optimizer, float lr) {
  const Tensor latest = params_->params_flat();
  if (latest.numel() == 0) {
    // A stage without parameters steps nothing (and counts no optimizer step).
  } else if (!params_->has_stash()) {
    optimizer.step(latest, params_->grads_flat(), lr);
  } else {
    // W(L + 1) is written over W(L - 1), which no micro-batch needs any more, and the two
    // arenas trade roles: W(L) becomes the previous version where it lies. The layers stay bound
    // to the bytes they were bound to, whose role flipped.
    optimizer.step(latest, params_->grads_flat(), params_->stash_flat(), lr);
    params_->swap_stash();
    bound_previous_ = !bound_previous_;
  }
  params_->start_gradients();  // the next step's first weight gradients write them
  ++latest_;
}

}  // namespace pt
