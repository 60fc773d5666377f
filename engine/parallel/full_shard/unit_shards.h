#pragma once
// Full sharding (--shard full; ZeRO-3, PyTorch FSDP) of one stage on one data-parallel replica.
// The stage's layers are cut into units (full_shard_units below); a unit's parameters, laid out
// as in the stage's arena (StageParameters::split_into_units), are a flat vector of n floats cut
// into R equal parts of c = ceil(n / R) (the last padded with zeros), as FSDP1's flat parameter
// is. Replica r keeps part r of every unit's parameters, gradients and optimizer state, and
// nothing else of them; the whole unit exists only while it is used:
//   gather   all-gather of the parts into the unit's own allocation (before its forward and
//            again before its backward, unless kept: FullShardConfig::reshard_after_forward)
//   release  the allocation dropped
//   reduce   once the unit's gradients are final (the stage's last weight gradient of the step):
//            reduce-scatter of the unit's gradients, summed over the step's micro-batches first,
//            into part r, and the unit's gradient allocation dropped
// Accumulating over micro-batches before the reduce-scatter, as FSDP2 does under a pipeline
// schedule (PyTorch's pipelining turns gradient sync on only for the last backward), keeps the
// sums the same bits as --dp's all-reduce: each replica adds its micro-batches, then the group
// adds the replicas, in the same order. The unit's whole gradient lives from its first weight
// gradient of the step to the reduce-scatter. With FullShardConfig::reduce_every_microbatch
// (FSDP2 without no_sync) a sharded unit is reduce-scattered after every micro-batch's weight
// gradient and the results added in its part: the whole gradient lives for one micro-batch
// only, at M times the traffic, and the sums are added in another order (replicas first).
//
// A unit holding a tied parameter (Model::ties: the sum crosses stages) is not sharded: it stays
// whole on every replica, its gradients all-reduced, as --dp does (FSDP2 likewise keeps tied
// weights in one unit that is gathered for both users; here the tie's users are on different
// stages, so the unit stays whole).
//
// The optimizer steps the parts (its update is element-wise, so the same bits as the unsharded
// step). The gradient norm's per-tensor sums of squares are summed from the parts' partial sums
// (another order than one pass over the tensor: equal to within ~1e-16 relative, so clipping
// factors and the NaN test agree with --dp; the norm printed may differ in its last digits).
//
// Hybrid sharding (--shard-group G, HSDP): the parts are cut across a shard group of G replicas
// and, after the reduce-scatter, all-reduced across the R / G replicas holding the same part
// (the replicate group); whole units are all-reduced over both. Sums are then added in another
// order than --dp's (within groups first): equal to within a few ulps, not bit for bit.
//
// Buffers of the collectives are host memory (a GPU stage goes through the host; no NCCL yet).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/optim/optimizer.h"
#include "engine/train/stage_parameters.h"

namespace pt {

struct FullShardConfig {
  int unit_layers = 1;                // --shard-unit: layers with parameters per unit
  bool reshard_after_forward = true;  // false: a gathered unit stays whole until the step ends
  // --shard-prefetch: the next unit's gather overlaps this one's compute, on a thread of its own.
  // Off by default: on our 2-core machines that thread competes with compute for the cores (5%
  // slower, measured) and holds up to two more units; it should pay where the link, not the
  // cores, is the bottleneck (not measured yet).
  bool prefetch = false;
  // --shard-reduce microbatch: reduce-scatter after every micro-batch (see above); false
  // (step): once, after the last.
  bool reduce_every_microbatch = false;
};

// Where the units of the stage [first, last) begin: a unit is `unit_layers` consecutive layers
// with parameters (layers without parameters join the unit before them; leading ones the first
// unit); a layer holding a tied parameter is a unit of its own.
std::vector<int> full_shard_units(const Model& model, int first, int last, int unit_layers);

class UnitShards {
 public:
  // Splits `params` into units and keeps only this replica's parts of the sharded ones.
  // `group`: the stage's device's shard group (the data-parallel group, or with --shard-group
  // the G replicas the parts are cut across); `replicate`: nullptr, or the group of replicas
  // holding the same part (hybrid sharding).
  UnitShards(StageParameters& params, const Model& model, Communicator& group,
             Communicator* replicate, const OptimizerConfig& config, int stage,
             const FullShardConfig& shard);
  UnitShards(const UnitShards&) = delete;
  UnitShards& operator=(const UnitShards&) = delete;

  StageParameters& params() const { return *params_; }
  const FullShardConfig& config() const { return config_; }
  bool sharded(size_t u) const { return units_.at(u).kind == Kind::sharded; }

  // ---- during the schedule (collective over the group: every replica in the same order) ----
  // gather = fill(u, materialize(u)) when the unit is not whole. materialize (local) allocates
  // the unit and returns its flat view; fill (the collective) writes the parts into it and
  // touches nothing else of the stage, so it may run on another thread (CollectiveQueue).
  void gather(size_t u);
  Tensor materialize(size_t u);
  void fill(size_t u, const Tensor& whole);
  // The unit's whole gradients allocated (zeros) for a weight gradient to write; local.
  void make_gradients(size_t u);
  void release(size_t u);
  // reduce = finish_reduce(u) after reduce_parts(u, reduce_source(u), accumulates(u));
  // reduce_parts is the collective (another thread may run it), the others are local.
  // accumulates(u) counts the unit's reductions this step: false for the first, whose sum
  // replaces the part's gradient; later ones add to it (reduce_every_microbatch).
  void reduce(size_t u);
  Tensor reduce_source(size_t u) const;
  bool accumulates(size_t u) { return units_.at(u).reductions++ > 0; }
  void reduce_parts(size_t u, const Tensor& grads, bool accumulate);
  void finish_reduce(size_t u);
  // ---- the step's epilogue ----
  // Zeroes the parts' gradients (a unit without a weight gradient this step adds nothing).
  void start_step();
  // The stage's tensors' sums of squares (tied copies excluded, as global_grad_norm does) into
  // squares[first_slot + i] for entry i; collective. `counts_replicas` false (tensor ranks
  // other than 0): tensors every tensor rank holds whole are left at 0 (counted by rank 0).
  void add_squares(std::vector<double>& squares, size_t first_slot, bool counts_replicas = true);
  // Scales the gradients by `factor` (clipping) and steps this replica's parts and the whole
  // units; then drops every gathered unit (its values are stale).
  void step(float factor, float lr);
  void release_all();

  // ---- checkpoints ----
  // Every unit whole (gathered; collective) for a save, or allocated for a load to fill.
  void gather_all();
  void materialize_all();
  // A whole unit's values back into this replica's parts, and the unit dropped (after a load).
  void take_params();
  // The optimizer state in the unsharded layout: gather_state is collective, take_state local.
  void gather_state(Optimizer& full);
  void take_state(const Optimizer& full);

  // Bytes held between steps: the parts (parameters, gradients) and the whole units, and the
  // optimizer state of both.
  size_t held_parameter_bytes() const;
  size_t held_gradient_bytes() const;
  size_t optimizer_state_bytes() const;
  // The largest number of bytes of gathered parameters and gradients held at once during the
  // last step's schedule (start_step to end_schedule; a checkpoint's gathers do not count).
  void end_schedule() { last_peak_gathered_ = peak_gathered_; }
  size_t peak_gathered_bytes() const { return last_peak_gathered_; }

 private:
  enum class Kind { empty, sharded, whole };
  struct Unit {
    Kind kind = Kind::empty;
    int64_t floats = 0;                    // n: the unit's arena in floats
    int64_t part = 0;                      // c: each replica's part (sharded)
    size_t slot = 0;                       // entry in parts_table_ (sharded)
    std::unique_ptr<Optimizer> optimizer;  // whole units' own
    int reductions = 0;                    // this step (submitted)
  };
  // This replica's [first, end) of unit u's floats.
  int64_t part_begin(const Unit& unit) const;
  int64_t part_end(const Unit& unit) const;
  void count_gathered();
  std::string what(std::string_view action, size_t u) const;

  StageParameters* params_;
  const Model* model_;
  Communicator* group_;
  Communicator* replicate_;
  int stage_;
  FullShardConfig config_;
  std::vector<Unit> units_;
  SizeTable parts_table_;  // one entry "unit{u}" of c floats per sharded unit
  Arena part_params_, part_grads_;
  std::unique_ptr<Optimizer> optimizer_;  // over parts_table_
  size_t peak_gathered_ = 0, last_peak_gathered_ = 0;
  std::vector<float> send_, recv_, stage_buf_;     // reductions and checkpoints
  std::vector<float> part_stage_;                  // reductions: a part's host copy
  std::vector<float> gather_recv_, gather_stage_;  // gathers (fill)
};

}  // namespace pt
