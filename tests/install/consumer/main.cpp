// Uses the installed headers and libraries the way a user's program would: the version, a shape,
// whether CUDA is there, and the library's entry point (engine/setup: a model factory, options,
// fit) training a small MLP built with the builder API as a 2-stage pipeline over two CPU
// devices, on synthetic data (the loss before and after, evaluated on that data).
#include <cstdint>
#include <cstdio>
#include <vector>

#include "engine/core/shape.h"
#include "engine/data/dataset.h"
#include "engine/devices/cuda_plugin.h"
#include "engine/devices/devices.h"
#include "engine/loop/fit.h"
#include "engine/process/version.h"
#include "engine/setup/run_main.h"
#include "engine/setup/training_run.h"
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

// One batch of features in [-1, 1) from a fixed LCG; the label says which of the first kClasses
// features is largest, so there is something to learn.
pt::Dataset synthetic_data() {
  pt::Dataset d;
  d.sample_shape = pt::Shape{kFeatures};
  d.num_classes = kClasses;
  uint32_t state = 12345;
  d.inputs.resize(kBatch * kFeatures);
  d.labels.resize(kBatch);
  for (float& v : d.inputs) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(state >> 8) / static_cast<float>(1u << 24) * 2.f - 1.f;
  }
  for (int64_t i = 0; i < kBatch; ++i) {
    int32_t best = 0;
    for (int32_t c = 1; c < kClasses; ++c)
      if (d.inputs[static_cast<size_t>(i * kFeatures + c)] >
          d.inputs[static_cast<size_t>(i * kFeatures + best)])
        best = c;
    d.labels[static_cast<size_t>(i)] = best;
  }
  return d;
}

pt::Tensor tensor_inputs(const pt::Dataset& d) {
  return pt::Tensor::borrow(const_cast<float*>(d.inputs.data()), pt::Shape{d.size(), kFeatures});
}
pt::Tensor tensor_labels(const pt::Dataset& d) {
  return pt::Tensor::borrow(const_cast<int32_t*>(d.labels.data()), pt::Shape{d.size()},
                            pt::DType::i32);
}

// The library's entry point as a user's program says it: a model factory, the options, fit.
int train(pt::Communicator* world) {
  pt::TrainingOptions opt;
  opt.devices = "cpu:0,cpu:1";
  opt.stages = 2;
  opt.microbatches = 4;
  opt.print = false;
  pt::TrainerConfig config;
  config.optimizer.lr = 0.1f;
  pt::TrainingRun run = pt::make_training(opt, make_mlp, kBatch, config, world);
  const pt::Dataset data = synthetic_data();
  pt::FitOptions fit;
  fit.batch = kBatch;
  fit.steps = 30;
  fit.shuffle = false;
  fit.log_every = 30;
  fit.watch_signals = false;
  const double first = run.engine->evaluate(tensor_inputs(data), tensor_labels(data)).loss;
  const pt::FitResult r = pt::fit(*run.engine, data, nullptr, fit);
  const double loss = run.engine->evaluate(tensor_inputs(data), tensor_labels(data)).loss;
  std::printf("{\"stages\": %zu, \"loss\": %.6f}\n", run.plan->partition.stages.size(), loss);
  std::printf("{\"first_loss\": %.6f, \"steps\": %lld}\n", first, static_cast<long long>(r.steps));
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
