// Embedding (see embedding.h). The lookup is two grid-stride loops: one over the n ids that
// lowers *first_bad with an integer atomicMin (order-independent, so deterministic), and one
// over the n*dim outputs that copies table rows (adjacent threads read adjacent floats of a
// row, coalesced) and zero-fills rows with a bad id so no out-of-range memory is read. The id
// check is its own loop so that it also runs when dim == 0, as the CPU's check does.
//
// The weight gradient is deterministic and has no float atomics: the positions are sorted by id
// with a stable radix sort (CUB), so each id's positions stay in increasing order; runs of equal
// ids are found (run-length encoding) and their starts computed (a prefix sum); then one block per
// run adds its rows into the table row, each thread a column, in position order — the CPU's
// order (cpu_embedding.cpp adds position by position), so the bits are the CPU's. No two blocks
// touch the same row, and a frequent token (a space, "the") costs one block a longer loop rather
// than contended atomics. The whole table is the slice [0, vocab) of itself: the same kernels
// serve a tensor-parallel rank's rows [first, first + count), ids outside them reading zeros
// and scattering nothing.
#include "kernels/cuda/embedding.h"

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
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

__global__ void positions_kernel(int32_t* positions, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    positions[i] = static_cast<int32_t>(i);
}

// Block r adds run r (ids[order[start[r] .. start[r] + length[r])] all equal run_id[r]) into
// dtable's row run_id[r] - first, when that row is in the slice. Threads walk the columns.
__global__ void embedding_add_runs_kernel(const int32_t* __restrict__ run_id,
                                          const int32_t* __restrict__ run_length,
                                          const int32_t* __restrict__ run_start,
                                          const int32_t* __restrict__ runs,
                                          const int32_t* __restrict__ order,
                                          const float* __restrict__ dy, float* __restrict__ dtable,
                                          int64_t dim, int64_t first, int64_t count) {
  const int r = static_cast<int>(blockIdx.x);
  if (r >= *runs) return;
  const int64_t local = static_cast<int64_t>(run_id[r]) - first;
  if (local < 0 || local >= count) return;
  const int begin = run_start[r], end = begin + run_length[r];
  float* row = dtable + local * dim;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    float acc = row[c];
    for (int k = begin; k < end; ++k) acc += dy[static_cast<int64_t>(order[k]) * dim + c];
    row[c] = acc;
  }
}

// The byte layout of the backward's scratch for n positions: six int arrays of n, the run count,
// then CUB's temporary storage (the largest of the three calls'), each 256-byte aligned.
struct BackwardScratch {
  size_t positions = 0, sorted_ids = 0, order = 0, run_id = 0, run_length = 0, run_start = 0,
         runs = 0, temp = 0, temp_bytes = 0, total = 0;
};

size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

cudaError_t backward_scratch(int64_t n, BackwardScratch& s) {
  const int items = static_cast<int>(n);
  size_t sort = 0, encode = 0, scan = 0;
  if (const cudaError_t e = cub::DeviceRadixSort::SortPairs(
          nullptr, sort, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
          static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), items);
      e != cudaSuccess)
    return e;
  if (const cudaError_t e = cub::DeviceRunLengthEncode::Encode(
          nullptr, encode, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
          static_cast<int32_t*>(nullptr), static_cast<int32_t*>(nullptr), items);
      e != cudaSuccess)
    return e;
  if (const cudaError_t e =
          cub::DeviceScan::ExclusiveSum(nullptr, scan, static_cast<const int32_t*>(nullptr),
                                        static_cast<int32_t*>(nullptr), items);
      e != cudaSuccess)
    return e;
  const size_t ints = aligned(static_cast<size_t>(n) * sizeof(int32_t));
  size_t at = 0;
  for (size_t* field :
       {&s.positions, &s.sorted_ids, &s.order, &s.run_id, &s.run_length, &s.run_start}) {
    *field = at;
    at += ints;
  }
  s.runs = at;
  at += 256;
  s.temp = at;
  s.temp_bytes = std::max({sort, encode, scan, size_t{1}});
  s.total = at + aligned(s.temp_bytes);
  return cudaSuccess;
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

size_t embedding_backward_scratch_bytes(int64_t n) {
  BackwardScratch s;
  if (n <= 0 || n > INT_MAX || backward_scratch(n, s) != cudaSuccess) return 0;
  return s.total;
}

cudaError_t launch_embedding_backward_weight_slice(const int32_t* ids, const float* dy,
                                                   float* dtable, int64_t n, int64_t dim,
                                                   int64_t first, int64_t count, void* scratch,
                                                   cudaStream_t stream) {
  if (n < 0 || n > INT_MAX) return cudaErrorInvalidValue;
  if (n == 0 || dim == 0) return cudaSuccess;
  BackwardScratch s;
  if (const cudaError_t e = backward_scratch(n, s); e != cudaSuccess) return e;
  if (scratch == nullptr) return cudaErrorInvalidValue;
  auto* base = static_cast<char*>(scratch);
  auto at = [&](size_t offset) { return reinterpret_cast<int32_t*>(base + offset); };
  const int items = static_cast<int>(n);
  const LaunchShape1d shape = launch_shape_1d(n);
  positions_kernel<<<static_cast<unsigned>(shape.blocks), static_cast<unsigned>(shape.threads), 0,
                     stream>>>(at(s.positions), n);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  size_t temp_bytes = s.temp_bytes;
  // Stable: positions with the same id keep their increasing order.
  if (const cudaError_t e =
          cub::DeviceRadixSort::SortPairs(base + s.temp, temp_bytes, ids, at(s.sorted_ids),
                                          at(s.positions), at(s.order), items, 0, 32, stream);
      e != cudaSuccess)
    return e;
  // Lengths past the run count stay 0, so the prefix sum below adds nothing undefined.
  if (const cudaError_t e =
          cudaMemsetAsync(at(s.run_length), 0, static_cast<size_t>(n) * sizeof(int32_t), stream);
      e != cudaSuccess)
    return e;
  temp_bytes = s.temp_bytes;
  if (const cudaError_t e = cub::DeviceRunLengthEncode::Encode(
          base + s.temp, temp_bytes, at(s.sorted_ids), at(s.run_id), at(s.run_length), at(s.runs),
          items, stream);
      e != cudaSuccess)
    return e;
  temp_bytes = s.temp_bytes;
  // Starts past the run count are never read (the kernel stops at *runs; at most n runs).
  if (const cudaError_t e = cub::DeviceScan::ExclusiveSum(
          base + s.temp, temp_bytes, at(s.run_length), at(s.run_start), items, stream);
      e != cudaSuccess)
    return e;
  const unsigned threads = static_cast<unsigned>(std::min<int64_t>(256, (dim + 31) / 32 * 32));
  embedding_add_runs_kernel<<<static_cast<unsigned>(n), threads, 0, stream>>>(
      at(s.run_id), at(s.run_length), at(s.run_start), at(s.runs), at(s.order), dy, dtable, dim,
      first, count);
  return cudaGetLastError();
}

// The whole table's ids are not bounded above here (the forward pass checked them): an
// unbounded slice.
cudaError_t launch_embedding_backward_weight(const int32_t* ids, const float* dy, float* dtable,
                                             int64_t n, int64_t dim, void* scratch,
                                             cudaStream_t stream) {
  return launch_embedding_backward_weight_slice(ids, dy, dtable, n, dim, 0, INT64_MAX, scratch,
                                                stream);
}

}  // namespace pt::cuda
