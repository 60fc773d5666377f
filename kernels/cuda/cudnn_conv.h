#pragma once
// 2-D convolution (NCHW, fp32) on cuDNN for the CUDA backend, with the semantics of pt::Backend's
// conv2d_* ops. Inside the plugin only.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "engine/core/backend.h"
#include "kernels/cuda/workspace.h"

namespace pt::cuda {

// One cuDNN handle queueing on one stream. Each op calls its WorkspaceFn at most once, only when
// the chosen algorithm needs workspace. Descriptors and the algorithms are cached per
// Conv2dShape (each op's algorithm chosen on its first use). Not thread-safe: one instance per
// stream, driven by one host thread at a time. Create it with the stream's device current.
class CudnnConv {
 public:
  // allow_tf32: let cuDNN round fp32 inputs to tf32 on tensor cores (CUDNN_DEFAULT_MATH);
  // otherwise only fp32 FMA kernels (CUDNN_FMA_MATH). Throws std::runtime_error naming the cuDNN
  // error when the handle cannot be created or bound to the stream.
  CudnnConv(cudaStream_t stream, bool allow_tf32);
  ~CudnnConv();
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;

  // y (N, K, P, Q) = conv(x (N, C, H, W), w (K, C, R, S)) + bias (K); overwrites y. bias nullable.
  void forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y,
               const WorkspaceFn& workspace);
  // dx (N, C, H, W) = the input gradient for dy (N, K, P, Q); overwrites dx.
  void backward_input(const Conv2dShape& s, const float* dy, const float* w, float* dx,
                      const WorkspaceFn& workspace);
  // dw (K, C, R, S) += the weight gradient; dbias (K) += dy summed over N, P, Q (dbias nullable).
  void backward_weight(const Conv2dShape& s, const float* dy, const float* x, float* dw,
                       float* dbias, const WorkspaceFn& workspace);

  // Shapes planned so far (for tests and diagnostics).
  size_t cached_shapes() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace pt::cuda
