#pragma once
// Data parallelism over pipeline replicas. Each replica is a PipelineTrainer with its own Model
// instance and devices, training on its share of every global batch; gradients are all-reduced
// between replicas per device (inside the replicas, overlapped with backward). This class runs
// the replicas this process holds side by side and combines what they report: the loss and
// accuracy are summed over replicas (each share is already divided by the global batch), and,
// when other processes hold replicas or stages, over the world communicator — so every process
// reports the same numbers once. No device gathers anyone's outputs: each replica computes its
// own loss (unlike PyTorch's DataParallel).
#include <functional>
#include <memory>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/parallel/whole_stages.h"
#include "engine/pipeline/pipeline_trainer.h"
#include "layers/tensor_parallel/group.h"

namespace pt {

class DataParallelTrainer final : public TrainingEngine {
 public:
  // Everything a run with R replicas needs, owned in one place: the models (one per replica
  // held here), the communicators, and the replicas (destroyed first).
  struct Parts {
    std::vector<std::unique_ptr<Communicator>> communicators;
    // --tp T: the groups the models' tensor-parallel layers call (before the models, which
    // point at them).
    std::vector<std::unique_ptr<TensorParallelGroup>> tensor_groups;
    std::vector<std::unique_ptr<Model>> models;
    // --tp T > 1: the model as written (unsharded), for checkpoints of whole tensors, and the
    // layers with parameters that declare no split (whole on every tensor rank).
    std::unique_ptr<Model> whole_model;
    std::vector<std::string> replicated_layers;
    std::vector<std::unique_ptr<PipelineTrainer>> replicas;  // each with parallel.replica set
    Communicator* world = nullptr;  // nullable: set when other processes take part
    // Asynchronous parameter-server workers do not meet every step: each reports its own
    // share of the loss scaled by the world's size (an estimate), with no exchange.
    bool local_step_stats = false;
    // With local_step_stats: the loss is summed over this group first (the stages of this
    // replica, which meet every step anyway; null: none), then scaled by local_stats_scale
    // (the replicas; 0: the world's size).
    Communicator* local_stats_group = nullptr;
    int local_stats_scale = 0;
  };
  explicit DataParallelTrainer(Parts parts);
  ~DataParallelTrainer() override;

  StepStats train_step(const Tensor& inputs, const Tensor& targets) override;
  // --update async: every local replica's windows at once, the loss summed over replicas and
  // exchanged between processes.
  std::vector<StepStats> train_steps(std::span<const HostBatch> batches) override;
  int window() const override { return replica(0).window(); }
  double recent_step_seconds() const override { return replica(0).recent_step_seconds(); }
  // Each replica evaluates its shard of the rows; the results are added up.
  EvalStats evaluate(const Tensor& inputs, const Tensor& targets, int64_t chunk = 1000) override;
  Model& model() const override { return replica(0).model(); }
  uint64_t seed() const override { return replica(0).seed(); }
  int64_t step() const override { return replica(0).step(); }
  void set_step(int64_t step) override;
  // Replica 0's stages (the replicas hold the same values).
  // With --tp T > 1: the whole stages put together from replica 0's tensor ranks (under
  // mpirun a collective among them, held by rank 0 only), as stages_to_save. With --shard full:
  // every replica gathers its units first (a collective), dropped again by the next step.
  std::vector<StageState> stage_states() override;
  std::vector<StageState> all_stage_copies() override;
  void stage_copies_loaded() override;
  // Replica 0's stages in the process that holds replica 0; nothing in the others.
  std::vector<StageState> stages_to_save() override;

  int local_replicas() const { return static_cast<int>(parts_.replicas.size()); }
  const std::vector<std::string>& replicated_layers() const { return parts_.replicated_layers; }
  PipelineTrainer& replica(int i) const { return *parts_.replicas[static_cast<size_t>(i)]; }

 private:
  // Runs job(i) for every replica held here at once (replica 0 on the calling thread), then
  // rethrows the first failure.
  void on_all_replicas(const std::function<void(int)>& job);
  // Whether copy i's loss counts: it holds the last stage, and it is tensor rank 0 (the T
  // tensor ranks of a replica compute the same loss).
  bool reports_loss(int i) const;
  // --tp T > 1: the tensor ranks of each replica held here (in one process: the copies
  // r T .. r T + T - 1; one process per rank: this process's copy), and the whole stages
  // checkpoints read and write (made on first use).
  int tensor_parallel() const { return replica(0).config().parallel.tensor_parallel; }
  std::vector<std::vector<StageState>> tensor_ranks(int replica_index,
                                                    std::vector<const Model*>& models) const;
  WholeStages& whole_stages();
  // Replica 0's whole stages, gathered now (see stage_states).
  std::vector<StageState> whole_replica_zero();

  Parts parts_;
  std::unique_ptr<WholeStages> whole_stages_;
};

// R replicas in this process: devices[r * D + d] is schedule device d of replica r. Each replica
// gets its own model from make_model(); for each device, its R copies form an in-process
// data-parallel group. `config.parallel` supplies bucket_bytes; the rest is filled in here.
//
// With T tensor ranks (--tp T, the mesh R x D x T, T innermost as Megatron-LM orders it) each
// replica is T pipeline copies, copy (r, t) holding rank t's slices of every stage
// (shard_model.h): devices[(r * D + d) * T + t] is its device d. The T copies of each (r, d)
// form the tensor-parallel group the layers of that device call; data-parallel groups join
// the R copies of each (d, t); the T copies of a replica see the same micro-batches.
std::unique_ptr<DataParallelTrainer> make_local_data_parallel(
    const std::function<Model()>& make_model, const std::vector<Backend*>& devices,
    const PipelineConfig& config, int replicas, int tensor_parallel = 1);

// One process of a multi-process run (mpirun / srun): world rank = replica * D + device, where
// D = config.schedule.num_devices; this process holds one device. Creates the pipeline and
// data-parallel communicators eagerly (collective over `world`: every rank must call this).
//
// With T tensor ranks: world rank = (replica * D + device) * T + t, as in one process.
std::unique_ptr<DataParallelTrainer> make_process_data_parallel(
    const std::function<Model()>& make_model, Backend& device, const PipelineConfig& config,
    Communicator& world, int replicas, int tensor_parallel = 1);

}  // namespace pt
