#pragma once
// Embedding lookup and its weight gradient, the CUDA side of Backend::embedding_* (same
// semantics as kernels/cpu/cpu_embedding.cpp).
//
// Every launcher queues its work on `stream` (asynchronous) and returns the first failing CUDA
// call's error (cudaSuccess otherwise); execution errors surface at the next synchronisation.
// All pointers are device pointers.
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace pt::cuda {

// y(n, dim) = table(vocab, dim)[ids[i]]. *first_bad is set to n, then lowered to the first
// position i whose id is outside [0, vocab) (y's row i is zero-filled): the caller copies it
// back and throws if it is below n. *first_bad is written even when n == 0 (and ids are checked
// even when dim == 0). n above INT32_MAX cannot be reported in an int: that returns
// cudaErrorInvalidValue and queues nothing.
cudaError_t launch_embedding_forward(const int32_t* ids, const float* table, float* y, int64_t n,
                                     int64_t dim, int64_t vocab, int* first_bad,
                                     cudaStream_t stream);

// Bytes of device scratch the weight gradients need for n positions (0 for n <= 0).
size_t embedding_backward_scratch_bytes(int64_t n);

// dtable[ids[i]] += dy(i) for i in [0, n) (ACCUMULATES), each row's additions in position order:
// the CPU's bits, the same every run, no float atomics (embedding.cu says how). `scratch` holds
// embedding_backward_scratch_bytes(n) and is the caller's again once the queued work is done.
// ids must be valid (the forward pass checked them; vocab is not passed here): ids outside the
// table add nothing to it.
cudaError_t launch_embedding_backward_weight(const int32_t* ids, const float* dy, float* dtable,
                                             int64_t n, int64_t dim, void* scratch,
                                             cudaStream_t stream);

// The vocab-parallel forms (Backend::embedding_*_slice): table(count, dim) holds the rows
// [first, first + count) of a table of `total` rows. y(n, dim) = table[ids[i] - first] for an
// id in the slice, zeros for the others; *first_bad as above, against [0, total).
cudaError_t launch_embedding_forward_slice(const int32_t* ids, const float* table, float* y,
                                           int64_t n, int64_t dim, int64_t first, int64_t count,
                                           int64_t total, int* first_bad, cudaStream_t stream);

// dtable[ids[i] - first] += dy(i) for the ids in [first, first + count) (ACCUMULATES, in
// position order as above); other ids add nothing. n above INT32_MAX is cudaErrorInvalidValue.
cudaError_t launch_embedding_backward_weight_slice(const int32_t* ids, const float* dy,
                                                   float* dtable, int64_t n, int64_t dim,
                                                   int64_t first, int64_t count, void* scratch,
                                                   cudaStream_t stream);

}  // namespace pt::cuda
