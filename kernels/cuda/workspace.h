#pragma once
// How the CUDA backend lends its cuDNN ops scratch memory (kernels/cuda/cudnn_conv.h,
// cudnn_attention.h). Inside the plugin only.
#include <cstddef>
#include <functional>

namespace pt::cuda {

// Returns device scratch of at least `bytes`, valid for work queued on the stream (the backend
// owns it, and may hand the same memory to the next op: that op is queued after this one).
using WorkspaceFn = std::function<void*(size_t bytes)>;

}  // namespace pt::cuda
