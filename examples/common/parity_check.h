#pragma once
// --parity-check, shared by the examples: the run is checked against single-device training,
// step by step.
//
// Before every step the reference — a pt::Trainer on one device doing gradient accumulation over
// the same R*M micro-batches, with the same thread count (the same GEMM arithmetic) — restarts
// from the run's own parameters and optimizer state (through a checkpoint, so any layout and
// any number of processes work), both train on the same batch, and every parameter is compared.
// Restarting each step keeps rounding differences from compounding: they grow about 1.4x per
// step when the two trajectories run apart, so no fixed tolerance holds over a long run, while
// one step from equal states stays within 1e-7 here. With one replica, or two replicas of one
// micro-batch each, the additions happen in the same order and every step must be bit-identical
// (which, step by step, makes the whole run bit-identical); otherwise the replicas' sums are
// grouped differently and each step must agree within kParityTolerance. Under mpirun every
// process checks the stages it holds and the verdict is combined over `world`. NaN counts as a
// difference of +inf (engine/report/compare.h). The first step of a resumed run starts from the
// checkpoint's state, so --resume combines with it.
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "engine/comm/communicator.h"
#include "engine/setup/training_options.h"
#include "engine/train/trainer.h"
#include "engine/train/training_engine.h"
#include "examples/common/forwarding_engine.h"
#include "layers/model.h"

namespace pt::examples {

inline constexpr double kParityTolerance = 1e-6;
// The exit status of a failed parity check.
inline constexpr int kExitParityFailed = 3;

class ParityCheckedEngine final : public ForwardingEngine {
 public:
  // `config`: the run's trainer configuration (its micro-batch count is per replica). With
  // `world`, every rank constructs it and calls train_step and verdict together.
  ParityCheckedEngine(TrainingEngine& run, const TrainingOptions& par,
                      const std::function<Model()>& make_model, TrainerConfig config, int threads,
                      Communicator* world);
  ~ParityCheckedEngine() override;  // removes the state folder

  // Copies the run's state into the reference, trains both on this batch, compares.
  StepStats train_step(const Tensor& inputs, const Tensor& targets) override;

  // Prints one line per tensor (the largest difference over all steps, and at which step) and the
  // verdict; returns 0 or kExitParityFailed. Collective over `world`.
  int verdict();

 private:
  struct Worst {
    double max_abs = 0;
    int64_t step = 0;  // the step after which it was seen
    bool nan = false;
  };
  void compare_after_step();

  Communicator* world_;
  bool exact_;
  int replicas_, tensor_ranks_, microbatches_per_replica_;
  std::filesystem::path state_dir_;  // the run's state before each step, as a checkpoint
  Model reference_model_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Trainer> reference_;
  std::map<std::string, Worst> worst_;  // per tensor this process holds
  int64_t steps_checked_ = 0;
};

}  // namespace pt::examples
