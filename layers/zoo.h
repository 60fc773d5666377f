#pragma once
// Models used by the examples, tests and benchmarks, defined once.
#include "layers/builder.h"

namespace pt {

// Fashion-MNIST MLP: 784-1024-1024-1024-1024-10 with ReLU (flatten first).
Model fashion_mlp();
// Fashion-MNIST CNN: conv(32,3,pad 1)-relu-maxpool(2)-conv(64,3,pad 1)-relu-maxpool(2)-
// flatten-linear(128)-relu-linear(10).
Model fashion_cnn();
// A deeper MLP for pipeline tests: flatten, then `hidden_layers` x (linear(width)-relu), then
// linear(10): 2 * hidden_layers + 2 layers in all.
Model deep_mlp(int hidden_layers, int64_t width, Shape input = {1, 28, 28});

}  // namespace pt
