#pragma once
// The whole parameters and optimizer state of one pipeline copy's stages under tensor
// parallelism, put together from the T tensor ranks' slices and cut back into them. Checkpoints
// store whole tensors (a model's signature and tensor names do not depend on T), so a run saved
// at one T resumes at any other, and pipetrain-ckpt has no shards to merge: saving gathers the
// slices here and hands these stages to the writer; loading fills these stages and cuts every
// rank's slices from them.
//
// The whole stages live on the device of the copy they stand for (rank 0's in one process, this
// process's under mpirun): one extra copy of a stage's parameters and optimizer state there,
// allocated on the first save or load.
#include <memory>
#include <span>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/train/stage_state.h"
#include "layers/model.h"

namespace pt {

class WholeStages {
 public:
  // `whole`: the model as written (make_model(), unsharded); `like`: the stages of one copy
  // (their layer ranges, devices and optimizer kinds are taken); `seed` as the run's.
  // `optimizer`: the optimizer every whole stage holds, for copies that hold none between
  // checkpoints (full sharding); nullptr: those `like` holds.
  WholeStages(std::unique_ptr<Model> whole, const std::vector<StageState>& like, uint64_t seed,
              const OptimizerConfig* optimizer = nullptr);
  ~WholeStages();

  std::vector<StageState> states();  // whole stages, with optimizers where `like` had them

  // In one process: ranks[t] are the stages of tensor rank t's copy, models[t] its model.
  void gather(const std::vector<std::vector<StageState>>& ranks,
              const std::vector<const Model*>& models);
  void scatter(const std::vector<std::vector<StageState>>& ranks,
               const std::vector<const Model*>& models) const;
  // One process per rank: `mine` are this process's stages, `tensor_group` its T ranks (an
  // all-gather, collective over the group); scatter needs no exchange.
  void gather(const std::vector<StageState>& mine, const Model& model, Communicator& tensor_group);

 private:
  // Stage k's whole tensors of `kind` (0 parameters, k >= 1 optimizer slot k - 1) from every
  // rank's flat arena of that kind, flats[t] rank t's (all with mine's layout), the slices as
  // `model` (one rank's) declares them; and the optimizer's step count from `mine`.
  void fill_whole(size_t k, int kind, const StageState& mine, const Model& model,
                  const std::vector<std::span<const float>>& flats);

  std::unique_ptr<Model> whole_;
  std::vector<std::unique_ptr<StageParameters>> params_;
  std::vector<std::unique_ptr<Optimizer>> optimizers_;
};

}  // namespace pt
