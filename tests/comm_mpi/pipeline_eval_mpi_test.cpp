// Evaluation of a 2-stage pipeline with one stage per process (mpirun -np 2), through the
// forward-only schedule, with a skip connection from stage 0 to stage 1 whose message per chunk
// (512 rows x 1024 floats = 2 MiB) is far above MPI's eager limit: a send then completes only
// once the receiver has posted its receive, so a runtime that waits for the skip's send before
// sending the activation, while the receiver takes the activation first, hangs until the timeout.
// The result must equal single-device evaluation bit for bit (checked on the rank holding the last
// stage, which evaluates the whole model on one device as the reference). Exits 1 on a failure.
#include <cmath>
#include <cstdio>
#include <vector>

#include <fmt/format.h>

#include "engine/comm/mpi.h"
#include "engine/core/random.h"
#include "engine/pipeline/pipeline_trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/builder.h"
#include "schedule/generators.h"
#include "schedule/lowering.h"
#include "schedule/validate.h"

namespace {

// flatten | linear(1024) save("x") relu linear(1024) || relu add_saved("x") linear(10) relu
// linear(10): the skip goes from layer 2 (stage 0) to layer 6 (stage 1).
pt::Model skip_model() {
  pt::ModelBuilder b(pt::Shape{16});
  b.flatten()
      .linear(1024)
      .save("x")
      .relu()
      .linear(1024)
      .relu()
      .add_saved("x")
      .linear(10)
      .relu()
      .linear(10);
  return b.cross_entropy().build();
}

}  // namespace

int main() {
  pt::MpiRuntime mpi;
  const std::unique_ptr<pt::Communicator> world = pt::mpi_world(60);
  const int rank = world->rank();
  if (world->size() != 2) {
    fmt::print(stderr, "run with mpirun -np 2 (got {} ranks)\n", world->size());
    return 1;
  }
  constexpr int64_t kRows = 600, kChunk = 512;  // chunks of 512 and 88 rows
  std::vector<float> x(static_cast<size_t>(kRows * 16));
  std::vector<int32_t> y(static_cast<size_t>(kRows));
  pt::CounterRng rng(7);
  for (float& v : x) v = static_cast<float>(rng.next_double() * 2 - 1);
  for (int32_t& v : y) v = static_cast<int32_t>(rng.next_below(10));
  const pt::Tensor inputs = pt::Tensor::borrow(x.data(), pt::Shape{kRows, 16});
  const pt::Tensor targets = pt::Tensor::borrow(y.data(), pt::Shape{kRows}, pt::DType::i32);

  pt::TrainerConfig trainer;
  trainer.microbatches = 2;
  trainer.seed = 5;
  pt::PipelineConfig pc;
  pc.trainer = trainer;
  pc.schedule = pt::sched::add_communication(pt::sched::generate("1f1b", 2, 2));
  pt::sched::require_valid(pc.schedule);
  pc.layers_per_stage = {5, 5};
  pc.timeout_s = 30;
  pc.parallel.pipeline_group = world.get();
  auto device = pt::make_cpu_backend(rank, 1);
  std::vector<pt::Backend*> devices(2, nullptr);
  devices[static_cast<size_t>(rank)] = device.get();
  pt::Model model = skip_model();
  pt::PipelineTrainer pipeline(model, devices, pc);
  const pt::EvalStats got = pipeline.evaluate(inputs, targets, kChunk);
  if (rank != 1) return 0;  // stage 0 computes no loss

  auto ref_device = pt::make_cpu_backend(0, 1);
  pt::Model ref_model = skip_model();
  pt::Trainer ref(ref_model, *ref_device, trainer);
  const pt::EvalStats want = ref.evaluate(inputs, targets, kChunk);
  const bool ok = std::isfinite(want.loss) && want.loss > 0 && got.loss == want.loss &&
                  got.accuracy == want.accuracy;
  fmt::print(
      "{}: 2-process evaluation with a 2 MiB skip message: loss {} vs single device {}, accuracy "
      "{} vs {}\n",
      ok ? "PASS" : "FAIL", got.loss, want.loss, got.accuracy, want.accuracy);
  return ok ? 0 : 1;
}
