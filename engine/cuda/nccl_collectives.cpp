// The NCCL communicator's collectives: all-reduce and broadcast in pieces of at most 64 MiB,
// reduce-scatter, all-gather and the barrier, each one State::run on the collective lane.
#include <algorithm>
#include <cstdint>
#include <mutex>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/cuda/nccl_communicator.h"
#include "engine/cuda/nccl_internal.h"

namespace pt::cuda {
namespace nccl_detail {
namespace {

// Largest piece of an all-reduce or broadcast handed to NCCL at once: bounds the page-locked
// staging of a host buffer, and NCCL's bandwidth is near its peak at this size. Pieces depend
// only on the element count, never on the kind of memory, so they match on every rank.
constexpr size_t kChunkBytes = size_t{64} << 20;

ncclDataType_t nccl_type(ElemType t) {
  switch (t) {
    case ElemType::f32: return ncclFloat32;
    case ElemType::f64: return ncclFloat64;
    case ElemType::i64: return ncclInt64;
  }
  throw UsageError(fmt::format("unknown ElemType {}", static_cast<int>(t)));
}

// ncclAvg: f32/f64 multiply each contribution by 1/R before the sum; i64 divides the sum by R,
// truncating toward zero like divide_by_ranks.
ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::mean ? ncclAvg : ncclSum; }

void check_count(int64_t n, std::string_view what, const State& s, std::string_view unit) {
  if (n < 0) throw UsageError(fmt::format("{}: {}: {} {} is negative", what, s.describe, n, unit));
}

}  // namespace
}  // namespace nccl_detail

using nccl_detail::nccl_mutex;
using nccl_detail::Staging;
using nccl_detail::State;

// Same bits on every rank: NCCL computes each reduced element once and copies that result to every
// rank. Ring all-reduce is a reduce-scatter (each chunk summed along the ring, ending on one rank)
// followed by an all-gather that forwards the finished chunk unchanged; tree all-reduce reduces up
// the tree and broadcasts the root's result down; NVLS/CollNet reduce in the switch or network and
// multicast the one result. nccl.h states it for ncclAllReduce: "leaves identical copies of result
// on each recvbuff". The summation order (and so the bits) may differ from the MPI and in-process
// communicators, and between runs whose NCCL picks another algorithm; replicas still agree.

void NcclCommunicator::all_reduce(void* data, int64_t n, ElemType type, ReduceOp op,
                                  std::string_view what) {
  State& s = *state_;
  nccl_detail::check_count(n, what, s, "elements");
  const ncclDataType_t dtype = nccl_detail::nccl_type(type);
  const ncclRedOp_t rop = nccl_detail::nccl_op(op);
  DeviceGuard guard(s.gpu);
  {
    std::lock_guard lock(nccl_mutex());
    s.throw_if_broken(what);
  }
  if (n == 0) return;
  const size_t es = elem_size(type);
  const size_t count = static_cast<size_t>(n);
  const size_t chunk = nccl_detail::kChunkBytes / es;
  Staging buffer(s, data, std::min(count, chunk) * es, what, "all_reduce");
  for (size_t offset = 0; offset < count; offset += chunk) {
    const size_t piece = std::min(chunk, count - offset);
    void* p = buffer.load(offset * es, piece * es);
    // One deadline per piece: the timeout detects a peer that stopped, not a large transfer.
    s.run(
        s.collectives, buffer.device() && offset == 0, "all_reduce", what,
        [&](ncclComm_t comm, cudaStream_t stream) {
          return ncclAllReduce(p, p, piece, dtype, rop, comm, stream);
        },
        [&] { return s.others(); });
    buffer.store(offset * es, piece * es);
  }
}

void NcclCommunicator::reduce_scatter(const float* in, float* out, int64_t count, ReduceOp op,
                                      std::string_view what) {
  State& s = *state_;
  nccl_detail::check_count(count, what, s, "elements per rank");
  DeviceGuard guard(s.gpu);
  {
    std::lock_guard lock(nccl_mutex());
    s.throw_if_broken(what);
  }
  if (count == 0) return;
  const size_t out_bytes = static_cast<size_t>(count) * sizeof(float);
  if (out_bytes / sizeof(float) != static_cast<size_t>(count) ||
      out_bytes > SIZE_MAX / static_cast<size_t>(s.size))
    throw UsageError(
        fmt::format("{}: {}: {} elements per rank do not fit in memory", what, s.describe, count));
  const size_t in_bytes = out_bytes * static_cast<size_t>(s.size);
  Staging input(s, in, in_bytes, what, "reduce_scatter input");
  Staging output(s, out, out_bytes, what, "reduce_scatter output");
  const void* sendbuff = input.load(0, in_bytes);
  void* recvbuff = output.place(0);
  const ncclRedOp_t rop = nccl_detail::nccl_op(op);
  s.run(
      s.collectives, input.device() || output.device(), "reduce_scatter", what,
      [&](ncclComm_t comm, cudaStream_t stream) {
        return ncclReduceScatter(sendbuff, recvbuff, static_cast<size_t>(count), ncclFloat32, rop,
                                 comm, stream);
      },
      [&] { return s.others(); });
  output.store(0, out_bytes);
}

void NcclCommunicator::all_gather(const void* in, void* out, size_t bytes, std::string_view what) {
  State& s = *state_;
  DeviceGuard guard(s.gpu);
  {
    std::lock_guard lock(nccl_mutex());
    s.throw_if_broken(what);
  }
  if (bytes == 0) return;
  if (bytes > SIZE_MAX / static_cast<size_t>(s.size))
    throw UsageError(
        fmt::format("{}: {}: {} bytes per rank do not fit in memory", what, s.describe, bytes));
  const size_t out_bytes = bytes * static_cast<size_t>(s.size);
  Staging input(s, in, bytes, what, "all_gather input");
  Staging output(s, out, out_bytes, what, "all_gather output");
  const void* sendbuff = input.load(0, bytes);
  void* recvbuff = output.place(0);
  s.run(
      s.collectives, input.device() || output.device(), "all_gather", what,
      [&](ncclComm_t comm, cudaStream_t stream) {
        return ncclAllGather(sendbuff, recvbuff, bytes, ncclUint8, comm, stream);
      },
      [&] { return s.others(); });
  output.store(0, out_bytes);
}

void NcclCommunicator::broadcast(void* data, size_t bytes, int root, std::string_view what) {
  State& s = *state_;
  s.check_rank(root, what, "root");
  DeviceGuard guard(s.gpu);
  {
    std::lock_guard lock(nccl_mutex());
    s.throw_if_broken(what);
  }
  if (bytes == 0) return;
  Staging buffer(s, data, std::min(bytes, nccl_detail::kChunkBytes), what, "broadcast");
  for (size_t offset = 0; offset < bytes; offset += nccl_detail::kChunkBytes) {
    const size_t piece = std::min(nccl_detail::kChunkBytes, bytes - offset);
    void* p = buffer.load(offset, piece);
    s.run(
        s.collectives, buffer.device() && offset == 0, "broadcast", what,
        [&](ncclComm_t comm, cudaStream_t stream) {
          return ncclBroadcast(p, p, piece, ncclUint8, root, comm, stream);
        },
        [&] { return s.others(); });
    buffer.store(offset, piece);
  }
}

// An all-reduce (max) of one float: no rank leaves before every rank arrived. The float lives in
// a page-locked block rather than in cudaMalloc'ed memory, whose cudaFree could synchronise the
// device in the destructor (see PinnedPool); max of zeros stays zero however often it runs.
void NcclCommunicator::barrier(std::string_view what) {
  State& s = *state_;
  DeviceGuard guard(s.gpu);
  {
    std::lock_guard lock(nccl_mutex());
    s.throw_if_broken(what);
  }
  float token = 0.f;
  Staging buffer(s, &token, sizeof(token), what, "barrier");
  void* p = buffer.load(0, sizeof(token));
  s.run(
      s.collectives, false, "barrier", what,
      [&](ncclComm_t comm, cudaStream_t stream) {
        return ncclAllReduce(p, p, 1, ncclFloat32, ncclMax, comm, stream);
      },
      [&] { return s.others(); });
}

}  // namespace pt::cuda
