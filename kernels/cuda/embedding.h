#pragma once
// Embedding lookup and its weight gradient, the CUDA side of Backend::embedding_* (same
// semantics as kernels/cpu/cpu_embedding.cpp).
//
// Every launcher queues its work on `stream` (asynchronous) and returns the first failing CUDA
// call's error (cudaSuccess otherwise); execution errors surface at the next synchronisation.
// All pointers are device pointers.
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

// dtable[ids[i]] += dy(i) for i in [0, n) (ACCUMULATES). Uses float atomicAdd, so where an id
// repeats, the order in which its rows add is not fixed and the last bits may differ from run
// to run (the CPU adds in position order). ids must be valid (the forward pass checked them;
// vocab is not passed here): negative ids are skipped, ids >= vocab are not detected.
cudaError_t launch_embedding_backward_weight(const int32_t* ids, const float* dy, float* dtable,
                                             int64_t n, int64_t dim, cudaStream_t stream);

// The vocab-parallel forms (Backend::embedding_*_slice): table(count, dim) holds the rows
// [first, first + count) of a table of `total` rows. y(n, dim) = table[ids[i] - first] for an
// id in the slice, zeros for the others; *first_bad as above, against [0, total).
cudaError_t launch_embedding_forward_slice(const int32_t* ids, const float* table, float* y,
                                           int64_t n, int64_t dim, int64_t first, int64_t count,
                                           int64_t total, int* first_bad, cudaStream_t stream);

// dtable[ids[i] - first] += dy(i) for the ids in [first, first + count) (ACCUMULATES, with
// float atomicAdd as above); other ids add nothing.
cudaError_t launch_embedding_backward_weight_slice(const int32_t* ids, const float* dy,
                                                   float* dtable, int64_t n, int64_t dim,
                                                   int64_t first, int64_t count,
                                                   cudaStream_t stream);

}  // namespace pt::cuda
