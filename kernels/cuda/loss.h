#pragma once
// Loss kernels, the CUDA side of Backend::softmax_xent_*, mse_backward and count_correct (same
// formulas as kernels/cpu/cpu_loss.cpp). mse_forward is a plain reduction and lives elsewhere.
//
// Every launcher queues its work on `stream` (asynchronous) and returns the first failing CUDA
// call's error (cudaSuccess otherwise); execution errors surface at the next synchronisation.
// All pointers are device pointers.
#include <cstdint>

#include <cuda_runtime_api.h>

namespace pt::cuda {

// probs(rows, classes) = softmax(logits) per row (max-subtracted). row_loss(rows) [double] =
// log(sum_c exp(x_c - max)) - (x_label - max) = -log probs[label], finite even where the
// probability underflows. *first_bad_row is set to `rows`, then lowered to the smallest row
// whose label is outside [0, classes) (that row's loss is 0): the caller copies both back,
// throws if *first_bad_row < rows, and adds row_loss in row order on the host.
// *first_bad_row is written even when rows == 0. rows above INT32_MAX cannot be reported in an
// int: that returns cudaErrorInvalidValue and queues nothing.
cudaError_t launch_softmax_xent_forward(const float* logits, const int32_t* labels, float* probs,
                                        double* row_loss, int* first_bad_row, int64_t rows,
                                        int64_t classes, cudaStream_t stream);

// dlogits(rows, classes) = scale * (probs - onehot(labels)). A label outside [0, classes)
// (rejected by the forward pass) contributes no one-hot. Nothing is launched for no elements.
cudaError_t launch_softmax_xent_backward(const float* probs, const int32_t* labels, float* dlogits,
                                         int64_t rows, int64_t classes, float scale,
                                         cudaStream_t stream);

// dpred(n) = scale * 2 * (pred - target). Nothing is launched when n == 0.
cudaError_t launch_mse_backward(const float* pred, const float* target, float* dpred, int64_t n,
                                float scale, cudaStream_t stream);

// *count = the number of rows whose arg-max (first maximum wins, as on the CPU) equals the
// label; a label outside [0, classes) never matches. *count is zeroed on the stream first, so
// it is written even when there are no rows.
cudaError_t launch_count_correct(const float* logits, const int32_t* labels, int64_t rows,
                                 int64_t classes, unsigned long long* count, cudaStream_t stream);

// ---- vocab-parallel softmax cross-entropy -----------------------------------------------------
// Backend::softmax_partials, softmax_combine and softmax_xent_backward_slice: logits split by
// classes across tensor-parallel ranks, each rank holding the classes [first, first + count)
// of `total` (partials' layout: engine/core/op_params.h).

// partials(rows, kSoftmaxPartialFloats) of logits(rows, count): one block per row, as the
// forward above. *first_bad_row as in launch_softmax_xent_forward, for labels outside
// [0, total).
cudaError_t launch_softmax_partials(const float* logits, const int32_t* labels, float* partials,
                                    int* first_bad_row, int64_t rows, int64_t first, int64_t count,
                                    int64_t total, cudaStream_t stream);

// One thread per row of partials(parts, rows, kSoftmaxPartialFloats): norm(rows, 2) = (M, S)
// unless norm is null; row_loss(rows) [double] = log S - (z_label - M), for the host to add in
// row order; *correct = the rows whose arg-max is the label (zeroed on the stream first).
// Labels must be valid (softmax_partials checked them).
cudaError_t launch_softmax_combine(const float* partials, const int32_t* labels, float* norm,
                                   double* row_loss, unsigned long long* correct, int64_t parts,
                                   int64_t rows, cudaStream_t stream);

// dlogits(rows, count) = scale * (exp(z - M) / S - onehot(labels - first)), norm(rows, 2) =
// (M, S); a label outside the slice adds no one-hot. Nothing is launched for no elements.
cudaError_t launch_softmax_xent_backward_slice(const float* logits, const int32_t* labels,
                                               const float* norm, float* dlogits, int64_t rows,
                                               int64_t first, int64_t count, float scale,
                                               cudaStream_t stream);

}  // namespace pt::cuda
