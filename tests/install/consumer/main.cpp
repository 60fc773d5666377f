// Uses the installed headers and libraries the way a user's program would.
#include <cstdio>

#include "engine/core/shape.h"
#include "engine/cuda_plugin.h"
#include "engine/version.h"

int main() {
  const pt::Shape shape{2, 3, 4};
  std::printf("pipetrain %s\n", pt::version());
  std::printf("shape %s numel %lld\n", shape.str().c_str(),
              static_cast<long long>(shape.numel()));
  // Loading the plugin is optional: a CPU-only program still links and runs without CUDA.
  std::printf("cuda: %s\n", pt::cuda_status().message.c_str());
  return 0;
}
