#pragma once
// The sharded optimizer (--shard-optimizer; ZeRO-1, Megatron's distributed optimizer) of one
// stage on one data-parallel replica. The R replicas of a stage split its parameter tensors into
// R contiguous ranges of WHOLE tensors, balanced by bytes; replica r owns range r. Whole tensors
// (never a tensor cut in two) keep the global norm's per-tensor sums of squares, and so clipping,
// bit-identical to the unsharded run: each tensor's sum of squares is computed by one replica
// over the same summed gradient the unsharded run would hold.
//
// A step (driven by finish_step, engine/train/step_epilogue.h):
//   reduce_gradients   reduce_scatter of the stage's gradient arena: the owner gets the sum of
//                      its range. Ranges have unequal sizes, so each replica's block is padded
//                      with zeros to the largest range (reduce_scatter takes equal counts; the
//                      padding costs at most one tensor's size per replica). The in-process
//                      communicator adds rank after rank (accumulate()) in reduce_scatter as in
//                      the unsharded all-reduce, so the sums are the same bits; under MPI the
//                      order is MPI's in both (the same bits for R = 2: a + b = b + a; for R > 2
//                      MPI may associate differently, ~1 ulp per step). Tied tensors
//                      (Model::ties) are all-reduced whole on top: the tie's sum crosses stages,
//                      whose ranges have other owners.
//   add_squares        the owner's tensors' sums of squares, exchanged with all_gather
//   step               the owner clips and steps its range with an Optimizer whose state covers
//                      only that range (~1/R of the stage's optimizer state)
//   gather_parameters  all_gather of the ranges: every replica holds all parameters again
// No overlap with backward: the reduction runs after the schedule (the bucketed all-reduce of
// the unsharded mode is not used).
//
// Checkpoints keep the unsharded format: gather_state assembles the full state on every replica
// (all_gather; replica 0 writes it, and the copies are dropped at the next step), take_state
// copies a replica's range out of a loaded full state.
//
// Buffers are host memory: a GPU stage's arenas go through the host (no NCCL), and the
// reduce-scatter's host buffer is R x the largest range (about the stage's gradient bytes).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/optim/optimizer.h"
#include "engine/train/stage_parameters.h"

namespace pt {

// The tensors [first_entry, end_entry) of a stage (entries in arena order) and the f32 elements
// [offset, offset + count) of its arenas they span, padding included.
struct ShardRange {
  size_t first_entry = 0, end_entry = 0;
  int64_t offset = 0, count = 0;
};

// One range per replica, tiling the arena; range r ends at the first tensor boundary at or past
// r+1 R-ths of the arena's bytes (a replica may own nothing when tensors are few and large).
std::vector<ShardRange> plan_optimizer_shards(const StageParameters& params, int replicas);

class StageShard {
 public:
  // `group`: this stage's device's data-parallel group (rank = replica), host buffers.
  StageShard(StageParameters& params, const Model& model, Communicator& group,
             const OptimizerConfig& config, int stage);
  StageShard(const StageShard&) = delete;
  StageShard& operator=(const StageShard&) = delete;

  void reduce_gradients();
  // Writes the sums of squares of the stage's tensors (tied copies excluded, as global_grad_norm
  // does) into squares[first_slot + i] for entry i; every replica gets the owners' values.
  void add_squares(std::vector<double>& squares, size_t first_slot);
  // Scales the owned gradients by `factor` (clipping) and steps the owned parameters.
  void step(float factor, float lr);
  void gather_parameters();

  // Checkpoints. gather_state is collective over the group; take_state is local.
  void gather_state(Optimizer& full);
  void take_state(const Optimizer& full);

  const StageParameters& params() const { return *params_; }
  const Optimizer& optimizer() const { return optimizer_; }
  const ShardRange& mine() const { return ranges_[static_cast<size_t>(group_->rank())]; }
  const std::vector<ShardRange>& ranges() const { return ranges_; }
  size_t state_bytes() const;

 private:
  Tensor range_view(const Tensor& flat) const;
  // all_gather of every replica's range (`mine`: this replica's, padded_ floats) into `flat`
  // (host floats of the whole arena).
  void gather_ranges(float* flat, const float* mine, std::string_view what);

  StageParameters* params_;
  Communicator* group_;
  int stage_;
  std::vector<ShardRange> ranges_;
  int64_t padded_ = 0;      // the largest range: every replica's block in the collectives
  std::vector<bool> tied_;  // per entry: a member of a tie (all-reduced whole)
  Optimizer optimizer_;     // over mine() only
  std::vector<float> send_, recv_, stage_buf_;  // host buffers of the collectives
};

// sqrt of the sum over every tensor of the model, in global order, of the sums of squares
// `fill(squares, first_tensor)` writes for the held stages (layer l's tensors from slot
// first_tensor[l]; zeros stay for tensors held elsewhere) and, with `pipeline_group`, the other
// processes write for theirs: global_grad_norm's order, for the sharded modes.
using FillSquares =
    std::function<void(std::vector<double>& squares, const std::vector<size_t>& first_tensor)>;
// With `tensor_group` (T > 1) the slots are summed over the tensor ranks too: `fill` writes a
// split tensor's slice's sum on every rank and a replicated tensor's on rank 0 only.
double norm_of_squares(const Model& model, Communicator* pipeline_group, const FillSquares& fill,
                       Communicator* tensor_group = nullptr);

// norm_of_squares of the held stages' shards: the same bits as global_grad_norm of the
// unsharded run.
double sharded_grad_norm(const std::vector<StageShard*>& shards, const Model& model,
                         Communicator* pipeline_group);

}  // namespace pt
