// CudaBackend's ops of particular layers: layer norm, convolution (cuDNN) and pooling, embedding
// (which checks its token ids), apart from the generic ops; attention has its own file.
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cudnn_conv.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/pool.h"

namespace pt::cuda {

// ---- normalisation --------------------------------------------------------------------------

void CudaBackend::layernorm_forward(const float* x, const float* gamma, const float* beta, float* y,
                                    float* mean, float* rstd, int64_t rows, int64_t cols,
                                    float eps) {
  DeviceGuard guard(device_);
  check(launch_layernorm_forward(x, gamma, beta, y, mean, rstd, rows, cols, eps, compute_),
        "launch_layernorm_forward");
}
void CudaBackend::layernorm_backward_input(const float* dy, const float* x, const float* gamma,
                                           const float* mean, const float* rstd, float* dx,
                                           int64_t rows, int64_t cols) {
  DeviceGuard guard(device_);
  check(launch_layernorm_backward_input(dy, x, gamma, mean, rstd, dx, rows, cols, compute_),
        "launch_layernorm_backward_input");
}
void CudaBackend::layernorm_backward_weight(const float* dy, const float* x, const float* mean,
                                            const float* rstd, float* dgamma, float* dbeta,
                                            int64_t rows, int64_t cols) {
  DeviceGuard guard(device_);
  check(launch_layernorm_backward_weight(dy, x, mean, rstd, dgamma, dbeta, rows, cols, compute_),
        "launch_layernorm_backward_weight");
}

// ---- convolution and pooling ----------------------------------------------------------------

void CudaBackend::conv2d_forward(const Conv2dShape& s, const float* x, const float* w,
                                 const float* bias, float* y) {
  DeviceGuard guard(device_);
  conv_->forward(s, x, w, bias, y, [this](size_t bytes) {
    return scratch(conv_workspace_, bytes, "cuDNN workspace");
  });
}
void CudaBackend::conv2d_backward_input(const Conv2dShape& s, const float* dy, const float* w,
                                        float* dx) {
  DeviceGuard guard(device_);
  conv_->backward_input(s, dy, w, dx, [this](size_t bytes) {
    return scratch(conv_workspace_, bytes, "cuDNN workspace");
  });
}
void CudaBackend::conv2d_backward_weight(const Conv2dShape& s, const float* dy, const float* x,
                                         float* dw, float* dbias) {
  DeviceGuard guard(device_);
  conv_->backward_weight(s, dy, x, dw, dbias, [this](size_t bytes) {
    return scratch(conv_workspace_, bytes, "cuDNN workspace");
  });
}
void CudaBackend::maxpool2d_forward(const Pool2dShape& s, const float* x, float* y,
                                    int32_t* argmax) {
  DeviceGuard guard(device_);
  check(launch_maxpool2d_forward(s, x, y, argmax, compute_), "launch_maxpool2d_forward");
}
void CudaBackend::maxpool2d_backward(const Pool2dShape& s, const float* dy, const int32_t* argmax,
                                     float* dx) {
  DeviceGuard guard(device_);
  check(launch_maxpool2d_backward(s, dy, argmax, dx, compute_), "launch_maxpool2d_backward");
}
void CudaBackend::avgpool2d_forward(const Pool2dShape& s, const float* x, float* y) {
  DeviceGuard guard(device_);
  check(launch_avgpool2d_forward(s, x, y, compute_), "launch_avgpool2d_forward");
}
void CudaBackend::avgpool2d_backward(const Pool2dShape& s, const float* dy, float* dx) {
  DeviceGuard guard(device_);
  check(launch_avgpool2d_backward(s, dy, dx, compute_), "launch_avgpool2d_backward");
}

// ---- embedding ------------------------------------------------------------------------------

void CudaBackend::embedding_forward(const int32_t* ids, const float* table, float* y, int64_t n,
                                    int64_t dim, int64_t vocab) {
  if (n == 0) return;
  DeviceGuard guard(device_);
  int* first_bad = static_cast<int*>(scratch(partials_, sizeof(int), "id check"));
  check(launch_embedding_forward(ids, table, y, n, dim, vocab, first_bad, compute_),
        "launch_embedding_forward");
  // The same check the CPU makes, at the cost of one small read-back per forward.
  int bad = 0;
  read_back(&bad, first_bad, sizeof(bad));
  if (bad < n) {
    int32_t id = 0;
    read_back(&id, ids + bad, sizeof(id));
    throw UsageError(
        fmt::format("token id {} at position {} is outside the embedding's vocabulary [0, {}): "
                    "the data does not match the model's vocabulary size",
                    id, bad, vocab));
  }
}
void* CudaBackend::embedding_gradient_scratch(int64_t n) {
  return scratch(embedding_scratch_, std::max<size_t>(embedding_backward_scratch_bytes(n), 1),
                 "embedding gradient scratch");
}
void CudaBackend::embedding_backward_weight(const int32_t* ids, const float* dy, float* dtable,
                                            int64_t n, int64_t dim) {
  DeviceGuard guard(device_);
  check(launch_embedding_backward_weight(ids, dy, dtable, n, dim, embedding_gradient_scratch(n),
                                         compute_),
        "launch_embedding_backward_weight");
}
void CudaBackend::embedding_forward_slice(const int32_t* ids, const float* table, float* y,
                                          int64_t n, int64_t dim, const VocabRange& range) {
  if (n == 0) return;
  DeviceGuard guard(device_);
  int* first_bad = static_cast<int*>(scratch(partials_, sizeof(int), "id check"));
  check(launch_embedding_forward_slice(ids, table, y, n, dim, range.first, range.count, range.total,
                                       first_bad, compute_),
        "launch_embedding_forward_slice");
  // Every rank checks the same ids against the whole vocabulary, so all refuse a bad batch
  // before the all-reduce that follows.
  int bad = 0;
  read_back(&bad, first_bad, sizeof(bad));
  if (bad < n) {
    int32_t id = 0;
    read_back(&id, ids + bad, sizeof(id));
    throw UsageError(
        fmt::format("token id {} at position {} is outside the embedding's vocabulary [0, {}): "
                    "the data does not match the model's vocabulary size",
                    id, bad, range.total));
  }
}
void CudaBackend::embedding_backward_weight_slice(const int32_t* ids, const float* dy,
                                                  float* dtable, int64_t n, int64_t dim,
                                                  const VocabRange& range) {
  DeviceGuard guard(device_);
  check(launch_embedding_backward_weight_slice(ids, dy, dtable, n, dim, range.first, range.count,
                                               embedding_gradient_scratch(n), compute_),
        "launch_embedding_backward_weight_slice");
}

}  // namespace pt::cuda
