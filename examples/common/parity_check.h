#pragma once
// --parity-check, shared by the examples: after a pipelined (or data-parallel) run, train the
// single-device reference on the same batches and compare every parameter.
//
// The reference is a pt::Trainer doing gradient accumulation over the same R*M micro-batches,
// with the same thread count (the same GEMM arithmetic). With one replica, or two replicas of
// one micro-batch each, the additions happen in the same order and the parameters must be
// bit-identical; otherwise the replicas' sums are grouped differently and they must agree within
// kParityTolerance. Under mpirun every process checks the stages it holds and the verdict is
// combined over `world`. NaN counts as a difference of +inf (engine/compare.h).
#include <functional>

#include "engine/comm/communicator.h"
#include "engine/setup/training_options.h"
#include "engine/trainer.h"
#include "engine/training_engine.h"
#include "layers/model.h"

namespace pt::examples {

inline constexpr double kParityTolerance = 1e-6;
// The exit status of a failed parity check.
inline constexpr int kExitParityFailed = 3;

// `config`: the pipelined run's trainer configuration (its micro-batch count is per replica).
// `train_same_batches` trains the reference it is given on the global batches the pipelined run
// trained on, in the same order, from step 0. Prints one line per tensor and the verdict;
// returns 0 or kExitParityFailed. Throws UsageError when the reference ends at another step than
// `pipelined` (a resumed run cannot be replayed).
int parity_check(const TrainingOptions& par, const std::function<Model()>& make_model,
                 TrainerConfig config, TrainingEngine& pipelined, int threads, Communicator* world,
                 const std::function<void(TrainingEngine& reference)>& train_same_batches);

}  // namespace pt::examples
