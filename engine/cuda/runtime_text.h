#pragma once
// Text for CUDA versions, and the copy of a reason into an ABI message buffer; the text of a CUDA
// result (error_name) is in kernels/cuda/cuda_check.h. Used only inside the plugin.
#include <cstddef>
#include <string>
#include <string_view>

#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_check.h"  // error_name

namespace pt::cuda {

// "13.0" from a CUDA version number such as 13000 (major * 1000 + minor * 10).
std::string version_text(int version);

// Copies `text` into message[0, size), truncating and always NUL-terminating (when size > 0).
// Tolerates message == nullptr.
void write_message(char* message, size_t size, std::string_view text);

}  // namespace pt::cuda
