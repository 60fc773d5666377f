#include "layers/zoo.h"

namespace pt {

Model fashion_mlp() {
  ModelBuilder b({1, 28, 28});
  b.flatten();
  for (int i = 0; i < 4; ++i) b.linear(1024).relu();
  return b.linear(10).cross_entropy().build();
}

Model fashion_cnn() {
  return ModelBuilder({1, 28, 28})
      .conv2d(32, 3, 1, 1).relu().max_pool(2)
      .conv2d(64, 3, 1, 1).relu().max_pool(2)
      .flatten().linear(128).relu().linear(10)
      .cross_entropy()
      .build();
}

Model deep_mlp(int hidden_layers, int64_t width, Shape input) {
  ModelBuilder b(input);
  b.flatten();
  for (int i = 0; i < hidden_layers; ++i) b.linear(width).relu();
  return b.linear(10).cross_entropy().build();
}

}  // namespace pt
