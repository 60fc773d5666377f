// Uses the installed headers and libraries the way a user's program would.
#include <cstdio>

#include "engine/core/shape.h"
#include "engine/cuda_plugin.h"
#include "engine/devices.h"
#include "engine/version.h"

int main() {
  const pt::Shape shape{2, 3, 4};
  std::printf("pipetrain %s\n", pt::version());
  std::printf("shape %s numel %lld\n", shape.str().c_str(),
              static_cast<long long>(shape.numel()));
  // Loading the plugin is optional: a CPU-only program still links and runs without CUDA.
  std::printf("cuda: %s\n", pt::cuda_status().message.c_str());
  // The CPU backend registers itself (engine/core/backend_registry.h): it must survive the
  // installed static libraries.
  const pt::DeviceSet devices = pt::open_devices("cpu:0", 1, 1);
  std::printf("device %s\n", devices.backends.at(0)->device().str().c_str());
  return 0;
}
