#pragma once
// Text for CUDA runtime results and versions, and the copy of a reason into an ABI message
// buffer. Used only inside the plugin.
#include <cstddef>
#include <string>
#include <string_view>

#include <cuda_runtime_api.h>

namespace pt::cuda {

// "cudaErrorInsufficientDriver (35)".
std::string error_name(cudaError_t e);

// "13.0" from a CUDA version number such as 13000 (major * 1000 + minor * 10).
std::string version_text(int version);

// Copies `text` into message[0, size), truncating and always NUL-terminating (when size > 0).
// Tolerates message == nullptr.
void write_message(char* message, size_t size, std::string_view text);

}  // namespace pt::cuda
