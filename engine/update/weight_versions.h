#pragma once
// PipeDream-2BW's weight stashing for one stage (--update async): the stage holds two versions
// of its parameters, the latest W(L) in its StageParameters' arena and the one before, W(L - 1),
// in a second arena of the same layout (the stash). A micro-batch of step t runs forward AND
// backward with W(t - 1); UPDATE(t) writes W(L + 1) = W(L) - lr * update(g_t), with g_t computed
// at W(t - 1) = W(L - 1), over the stash (the optimizer's out-of-place step: no copy of W(L)
// first) and the two arenas trade roles.
//
// With --async-delay per-stage or per-microbatch the last stage keeps no previous version: its
// backward of a micro-batch follows its forward at once, so its UPDATE(t - 1) runs before step
// t's first forward and step t can compute with W(t) itself (delay 0; async_delay.h). With
// per-microbatch the other stages bind W(t - 1) or W(t) micro-batch by micro-batch: the UPDATE
// writes over W(L - 1) only after the last backward that used it.
//
// Switching versions rebinds the stage's layers to views of the other arena (Layer::bind: a
// handful of tensor handles per layer, no copy); it happens only when the version a stage's next
// compute action needs differs from the bound one.
#include <cstdint>

#include "engine/optim/optimizer.h"
#include "engine/train/stage_parameters.h"
#include "layers/model.h"

namespace pt {

class WeightVersions {
 public:
  // `latest`: the version index the parameters hold now (the trainer's step). With
  // `keep_previous` the previous version starts as a copy of it (W(-1) = W(0) at the start of
  // training); without, only W(L) is held and bound. The previous version lives in the stage's
  // stash (StageParameters::has_stash says whether there is one).
  WeightVersions(Model& model, StageParameters& params, int64_t latest, bool keep_previous = true);

  int64_t latest() const { return latest_; }
  // Renumbers the versions held (resuming at `latest`; the arenas' contents stay).
  void set_latest(int64_t latest) { latest_ = latest; }
  // Binds the stage's layers to `version`; throws std::logic_error when it is neither W(L) nor
  // (when kept) W(L - 1): a schedule that needs a version the stage does not hold.
  void bind(int64_t version);
  // Applies UPDATE with the stage's accumulated gradients, finished by the caller
  // (StageParameters::finish_gradients, before it reduces them or takes their norm); the next
  // step's first weight gradients write them anew (start_gradients).
  void update(Optimizer& optimizer, float lr);
  size_t extra_bytes() const { return params_->stash_bytes(); }

 private:
  void bind_arena(bool previous);

  Model* model_;
  StageParameters* params_;
  int64_t latest_;
  bool bound_previous_ = false;
};

}  // namespace pt
