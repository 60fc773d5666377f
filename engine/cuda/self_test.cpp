// self_test: run kernels/cuda/fill.cu on one GPU and check every element on the host. A wrong
// architecture (no SASS or PTX for this GPU) shows up here as cudaErrorNoKernelImageForDevice.
#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "engine/cuda/entries.h"
#include "engine/cuda/runtime_text.h"
#include "kernels/cuda/fill.h"

namespace pt::cuda {

namespace {

// An odd count so that the last block is partial.
constexpr int64_t kElements = 100003;
constexpr float kValue = 1.5f;

// The failing call and its error, for the message.
std::string failed(const std::string& device, const char* call, cudaError_t e) {
  (void)cudaGetLastError();
  return "self-test on " + device + ": " + call + " failed with " + error_name(e) + ": " +
         cudaGetErrorString(e);
}

}  // namespace

int self_test(int device, char* message, size_t message_size) noexcept {
  try {
    const std::string name = "cuda:" + std::to_string(device);
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) {
      write_message(message, message_size, failed(name, "cudaSetDevice", e));
      return PT_CUDA_ERROR;
    }
    const size_t bytes = static_cast<size_t>(kElements) * sizeof(float);
    void* raw = nullptr;
    e = cudaMalloc(&raw, bytes);
    if (e != cudaSuccess) {
      write_message(message, message_size, failed(name, "cudaMalloc", e));
      return PT_CUDA_ERROR;
    }
    float* x = static_cast<float*>(raw);
    std::vector<float> host(static_cast<size_t>(kElements), 0.f);
    const char* step = "launch_fill";
    e = launch_fill(x, kValue, kElements, nullptr);
    if (e == cudaSuccess) {
      step = "cudaDeviceSynchronize";
      e = cudaDeviceSynchronize();
    }
    if (e == cudaSuccess) {
      step = "cudaMemcpy";
      e = cudaMemcpy(host.data(), x, bytes, cudaMemcpyDeviceToHost);
    }
    (void)cudaFree(x);
    if (e != cudaSuccess) {
      write_message(message, message_size, failed(name, step, e));
      return PT_CUDA_ERROR;
    }
    for (size_t i = 0; i < host.size(); ++i) {
      if (host[i] != kValue) {
        write_message(message, message_size,
                      "self-test on " + name + ": fill wrote " + std::to_string(host[i]) +
                          " at index " + std::to_string(i) + " of " + std::to_string(kElements) +
                          ", expected " + std::to_string(kValue));
        return PT_CUDA_ERROR;
      }
    }
    write_message(message, message_size,
                  "self-test on " + name + ": fill kernel wrote " + std::to_string(kElements) +
                      " floats correctly");
    return PT_CUDA_OK;
  } catch (...) {
    write_message(message, message_size, "self-test failed with an exception");
    return PT_CUDA_ERROR;
  }
}

}  // namespace pt::cuda
