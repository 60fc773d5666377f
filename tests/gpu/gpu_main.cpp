// main() of the GPU tests (ctest label `gpu`): without a usable CUDA device they are skipped
// with exit code 77 and the one-line reason, so CI machines without a GPU report "skipped", not
// "passed".
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "engine/devices/cuda_plugin.h"

int main(int argc, char** argv) {
  const pt::CudaStatus& cuda = pt::cuda_status();
  if (!cuda.available) {
    std::printf("skipped: %s\n", cuda.message.c_str());
    return 77;
  }
  for (const pt::CudaDeviceInfo& d : cuda.devices) std::printf("%s\n", d.str().c_str());
  doctest::Context context(argc, argv);
  return context.run();
}
