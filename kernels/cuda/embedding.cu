// Embedding (see embedding.h). The lookup is two grid-stride loops: one over the n ids that
// lowers *first_bad with an integer atomicMin (order-independent, so deterministic), and one
// over the n*dim outputs that copies table rows (adjacent threads read adjacent floats of a
// row, coalesced) and zero-fills rows with a bad id so no out-of-range memory is read. The id
// check is its own loop so that it also runs when dim == 0, as the CPU's check does. The weight
// gradient scatters with float atomicAdd, one thread per (position, column): that avoids
// sorting the ids to group repeats, at the cost of a summation order for a repeated id that is
// not fixed between runs. The whole table is the slice [0, vocab) of itself: the same kernels
// serve a tensor-parallel rank's rows [first, first + count), ids outside them reading zeros
// and scattering nothing.
#include "kernels/cuda/embedding.h"

#include <climits>
#include <cstdint>

#include "kernels/cuda/launch_shape.h"

namespace pt::cuda {

namespace {

__global__ void set_int_kernel(int* target, int value) { *target = value; }

__global__ void find_first_bad_id_kernel(const int32_t* __restrict__ ids, int64_t n, int64_t vocab,
                                         int* first_bad) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    if (ids[i] < 0 || ids[i] >= vocab) atomicMin(first_bad, static_cast<int>(i));
}

// y(n, dim) = table[ids[i] - first] for ids in [first, first + count), zeros otherwise.
__global__ void embedding_gather_kernel(const int32_t* __restrict__ ids,
                                        const float* __restrict__ table, float* __restrict__ y,
                                        int64_t n, int64_t dim, int64_t first, int64_t count) {
  const int64_t total = n * dim;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += stride) {
    const int64_t i = e / dim, c = e - i * dim;
    const int64_t local = static_cast<int64_t>(ids[i]) - first;
    y[e] = local >= 0 && local < count ? table[local * dim + c] : 0.f;
  }
}

// dtable[ids[i] - first] += dy(i) for ids in [first, first + count).
__global__ void embedding_scatter_add_kernel(const int32_t* __restrict__ ids,
                                             const float* __restrict__ dy,
                                             float* __restrict__ dtable, int64_t n, int64_t dim,
                                             int64_t first, int64_t count) {
  const int64_t total = n * dim;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += stride) {
    const int64_t i = e / dim, c = e - i * dim;
    const int64_t local = static_cast<int64_t>(ids[i]) - first;
    if (local >= 0 && local < count) atomicAdd(dtable + local * dim + c, dy[e]);
  }
}

}  // namespace

cudaError_t launch_embedding_forward_slice(const int32_t* ids, const float* table, float* y,
                                           int64_t n, int64_t dim, int64_t first, int64_t count,
                                           int64_t total, int* first_bad, cudaStream_t stream) {
  if (n < 0 || n > INT_MAX) return cudaErrorInvalidValue;
  set_int_kernel<<<1, 1, 0, stream>>>(first_bad, static_cast<int>(n));
  if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;

  const LaunchShape1d check = launch_shape_1d(n);
  if (check.blocks == 0) return cudaSuccess;
  find_first_bad_id_kernel<<<static_cast<unsigned>(check.blocks),
                             static_cast<unsigned>(check.threads), 0, stream>>>(ids, n, total,
                                                                                first_bad);
  if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;

  const LaunchShape1d gather = launch_shape_1d(dim > 0 ? n * dim : 0);
  if (gather.blocks == 0) return cudaSuccess;
  embedding_gather_kernel<<<static_cast<unsigned>(gather.blocks),
                            static_cast<unsigned>(gather.threads), 0, stream>>>(ids, table, y, n,
                                                                                dim, first, count);
  return cudaGetLastError();
}

cudaError_t launch_embedding_forward(const int32_t* ids, const float* table, float* y, int64_t n,
                                     int64_t dim, int64_t vocab, int* first_bad,
                                     cudaStream_t stream) {
  return launch_embedding_forward_slice(ids, table, y, n, dim, 0, vocab, vocab, first_bad, stream);
}

cudaError_t launch_embedding_backward_weight_slice(const int32_t* ids, const float* dy,
                                                   float* dtable, int64_t n, int64_t dim,
                                                   int64_t first, int64_t count,
                                                   cudaStream_t stream) {
  const LaunchShape1d shape = launch_shape_1d(n > 0 && dim > 0 ? n * dim : 0);
  if (shape.blocks == 0) return cudaSuccess;
  embedding_scatter_add_kernel<<<static_cast<unsigned>(shape.blocks),
                                 static_cast<unsigned>(shape.threads), 0, stream>>>(
      ids, dy, dtable, n, dim, first, count);
  return cudaGetLastError();
}

// The whole table's ids are not bounded above here (the forward pass checked them): an
// unbounded slice.
cudaError_t launch_embedding_backward_weight(const int32_t* ids, const float* dy, float* dtable,
                                             int64_t n, int64_t dim, cudaStream_t stream) {
  return launch_embedding_backward_weight_slice(ids, dy, dtable, n, dim, 0, INT64_MAX, stream);
}

}  // namespace pt::cuda
