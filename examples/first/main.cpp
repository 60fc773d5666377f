// The shortest program that trains a pipeline: a model from the builder, the options, fit. It is
// the README's "A first program", compiled with the examples and run by the tests
// (tests/examples/first_program.sh): Fashion-MNIST, an MLP as 2 stages on two CPU devices.
#include <cstdio>

#include "engine/loop/fit.h"
#include "engine/setup/training_run.h"
#include "layers/builder.h"

int main() {
  const auto mlp = [] {
    return pt::ModelBuilder({1, 28, 28})
        .flatten()
        .linear(512)
        .relu()
        .linear(512)
        .relu()
        .linear(10)
        .cross_entropy()
        .build();
  };
  pt::TrainingOptions opt;  // the examples' flags as fields: --devices, --stages, --schedule, ...
  opt.devices = "cpu:0,cpu:1";
  opt.stages = 2;
  opt.microbatches = 8;
  pt::TrainingRun run = pt::make_training(opt, mlp, /*batch=*/256);
  const pt::Dataset train = pt::load_fashion_mnist(),
                    test = pt::load_fashion_mnist(pt::kFashionMnistDir, false);
  pt::FitOptions fit;  // batch 256, 1 epoch; progress, checkpoints, metrics: its fields
  const pt::FitResult r = pt::fit(*run.engine, train, &test, fit);
  std::printf("test accuracy %.4f\n", r.test.accuracy);
}
