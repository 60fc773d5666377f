// Uses the installed headers and libraries the way a user's program would: the version, a shape,
// whether CUDA is there, and the library's entry point (engine/setup) training a small MLP built
// with the builder API as a 2-stage pipeline over two CPU devices, on synthetic data.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "engine/core/shape.h"
#include "engine/cuda_plugin.h"
#include "engine/devices.h"
#include "engine/setup/run_main.h"
#include "engine/setup/training_run.h"
#include "engine/version.h"
#include "layers/builder.h"

namespace {

constexpr int64_t kBatch = 64, kFeatures = 16, kClasses = 4;

pt::Model make_mlp() {
  return pt::ModelBuilder({kFeatures})
      .linear(32)
      .relu()
      .linear(32)
      .relu()
      .linear(kClasses)
      .cross_entropy()
      .build();
}

// Features in [-1, 1) from a fixed LCG; the label says which of the first kClasses features is
// largest, so there is something to learn.
void synthetic_batch(std::vector<float>& x, std::vector<int32_t>& y) {
  uint32_t state = 12345;
  x.resize(kBatch * kFeatures);
  y.resize(kBatch);
  for (float& v : x) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(state >> 8) / static_cast<float>(1u << 24) * 2.f - 1.f;
  }
  for (int64_t i = 0; i < kBatch; ++i) {
    int32_t best = 0;
    for (int32_t c = 1; c < kClasses; ++c)
      if (x[static_cast<size_t>(i * kFeatures + c)] > x[static_cast<size_t>(i * kFeatures + best)])
        best = c;
    y[static_cast<size_t>(i)] = best;
  }
}

int train(pt::Communicator* world) {
  pt::TrainingOptions opt;
  opt.devices = "cpu:0,cpu:1";
  opt.threads = 1;
  opt.stages = 2;
  opt.microbatches = 4;
  opt.print = false;
  pt::TrainerConfig config;
  config.optimizer.lr = 0.1f;
  pt::Model model = make_mlp();
  pt::TrainingRun run = pt::make_training(opt, model, make_mlp, config, kBatch, world);

  std::vector<float> xs;
  std::vector<int32_t> ys;
  synthetic_batch(xs, ys);
  const pt::Tensor x = pt::Tensor::borrow(xs.data(), pt::Shape{kBatch, kFeatures});
  const pt::Tensor y = pt::Tensor::borrow(ys.data(), pt::Shape{kBatch}, pt::DType::i32);
  constexpr int kSteps = 30;
  double first = 0, loss = 0;
  for (int step = 0; step < kSteps; ++step) {
    loss = run.engine->train_step(x, y).loss;
    if (step == 0) first = loss;
  }
  std::printf("{\"stages\": %zu, \"loss\": %.6f}\n", run.plan->partition.stages.size(), loss);
  std::printf("{\"first_loss\": %.6f, \"steps\": %d}\n", first, kSteps);
  return 0;
}

}  // namespace

int main() {
  const pt::Shape shape{2, 3, 4};
  std::printf("pipetrain %s\n", pt::version());
  std::printf("shape %s numel %lld\n", shape.str().c_str(), static_cast<long long>(shape.numel()));
  // Loading the plugin is optional: a CPU-only program still links and runs without CUDA.
  std::printf("cuda: %s\n", pt::cuda_status().message.c_str());
  // The CPU backend registers itself (engine/core/backend_registry.h): it must survive the
  // installed static libraries.
  const pt::DeviceSet devices = pt::open_devices("cpu:0", 1, 1);
  std::printf("device %s\n", devices.backends.at(0)->device().str().c_str());
  std::fflush(stdout);
  return pt::run_main(60, train);
}
