// The MPI communicator's collectives: small all-reduces and the rest as MPI's nonblocking
// collectives in pieces, large all-reduces by point-to-point messages (pairwise_all_reduce),
// whose summation order gives every rank the same bits.
#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "engine/comm/backoff.h"
#include "engine/comm/mpi_communicator.h"
#include "engine/core/error.h"

namespace pt::mpi_detail {
namespace {

// Largest piece of an all-reduce (and broadcast) handed to MPI at once. A single all-reduce of
// >= 32 MiB was measured 10x slower per byte on our machines than the same bytes in 4 MiB pieces.
constexpr size_t kChunkBytes = size_t{4} << 20;
// All-reduces of at least this many bytes go by point-to-point messages (pairwise_all_reduce);
// smaller ones by MPI_Iallreduce, whose few messages cost less latency.
constexpr size_t kPairwiseMinBytes = size_t{256} << 10;

MPI_Datatype mpi_type(ElemType t) {
  switch (t) {
    case ElemType::f32: return MPI_FLOAT;
    case ElemType::f64: return MPI_DOUBLE;
    case ElemType::i64: return MPI_INT64_T;
  }
  throw UsageError(fmt::format("unknown ElemType {}", static_cast<int>(t)));
}

}  // namespace

void MpiCommunicator::all_reduce(void* data, int64_t n, ElemType type, ReduceOp op,
                                 std::string_view what) {
  throw_if_broken(what);
  if (n < 0)
    throw UsageError(fmt::format("{}: {}: element count {} is negative", what, describe_, n));
  const size_t es = elem_size(type);
  const int64_t chunk = static_cast<int64_t>(kChunkBytes / es);
  auto* bytes = static_cast<std::byte*>(data);
  if (size_ > 1 && static_cast<size_t>(n) * es >= kPairwiseMinBytes) {
    pairwise_all_reduce(bytes, n, type, what);
    if (op == ReduceOp::mean) divide_by_ranks(data, n, type, size_);
    return;
  }
  // One deadline per piece: the timeout detects a peer that stopped, not a large transfer.
  for (int64_t offset = 0; offset < n; offset += chunk) {
    const int count = static_cast<int>(std::min(chunk, n - offset));
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallreduce(MPI_IN_PLACE, bytes + offset * es, count, mpi_type(type), MPI_SUM, comm_,
                         &request),
          "MPI_Iallreduce");
    wait_collective(request, "all_reduce", what);
  }
  // mean = the sum divided by R, on every rank alike (the same bits everywhere).
  if (op == ReduceOp::mean) divide_by_ranks(data, n, type, size_);
}

void MpiCommunicator::reduce_scatter(const float* in, float* out, int64_t count, ReduceOp op,
                                     std::string_view what) {
  throw_if_broken(what);
  const int n = to_int(count, what, "elements per rank");
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ireduce_scatter_block(in, out, n, MPI_FLOAT, MPI_SUM, comm_, &request),
        "MPI_Ireduce_scatter_block");
  wait_collective(request, "reduce_scatter", what);
  if (op == ReduceOp::mean) divide_by_ranks(out, count, ElemType::f32, size_);
}

void MpiCommunicator::all_gather(const void* in, void* out, size_t bytes, std::string_view what) {
  throw_if_broken(what);
  const int n = to_int(static_cast<int64_t>(bytes), what, "bytes per rank");
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Iallgather(in, n, MPI_BYTE, out, n, MPI_BYTE, comm_, &request), "MPI_Iallgather");
  wait_collective(request, "all_gather", what);
}

void MpiCommunicator::broadcast(void* data, size_t bytes, int root, std::string_view what) {
  throw_if_broken(what);
  check_rank(root, what, "root");
  auto* p = static_cast<std::byte*>(data);
  for (size_t offset = 0; offset < bytes; offset += kChunkBytes) {
    const int count = static_cast<int>(std::min(kChunkBytes, bytes - offset));
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ibcast(p + offset, count, MPI_BYTE, root, comm_, &request), "MPI_Ibcast");
    wait_collective(request, "broadcast", what);
  }
}

void MpiCommunicator::barrier(std::string_view what) {
  throw_if_broken(what);
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier");
  wait_collective(request, "barrier", what);
}

// ---- the large all-reduce ----------------------------------------------------------------------

// The requests of one phase of pairwise_all_reduce, and for each receive the rank it waits for.
struct MpiCommunicator::PendingMessages {
  std::vector<MPI_Request> requests;
  std::vector<int> from;  // per request: the source of a receive, -1 for a send

  void receive(std::byte* into, size_t bytes, int src, int tag, MPI_Comm comm) {
    requests.push_back(MPI_REQUEST_NULL);
    from.push_back(src);
    check(MPI_Irecv(into, static_cast<int>(bytes), MPI_BYTE, src, tag, comm, &requests.back()),
          "MPI_Irecv");
  }
  void send(const std::byte* data, size_t bytes, int dst, int tag, MPI_Comm comm) {
    requests.push_back(MPI_REQUEST_NULL);
    from.push_back(-1);
    check(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, dst, tag, comm, &requests.back()),
          "MPI_Isend");
  }
};

// A large all-reduce as a reduce-scatter and an all-gather by point-to-point messages, in pieces
// of size_ blocks of at most kChunkBytes. Rank b sums block b of every rank in rank order
// ((x0 + x1) + x2 ..., as the in-process group does) and sends the sum to all the others, so
// every rank holds the same bits. Each rank sends and receives (R - 1)/R of the bytes twice, as
// a ring does, in R - 1 messages at once; on one machine Open MPI's shared-memory transport
// copies each large message once (single-copy CMA, btl_vader_single_copy_mechanism's
// default). 16 MiB between 2 processes here: 3.4-4.6 ms this way, 5.4-14 ms as MPI_Iallreduce
// in 4 MiB pieces (libnbc's schedule advances only inside our MPI_Test calls).
void MpiCommunicator::pairwise_all_reduce(std::byte* data, int64_t n, ElemType type,
                                          std::string_view what) {
  const size_t es = elem_size(type);
  const int64_t piece = static_cast<int64_t>(kChunkBytes / es) * size_;
  const auto slot = [&](int q) { return scratch_.data() + static_cast<size_t>(q) * kChunkBytes; };
  scratch_.resize(static_cast<size_t>(size_) * kChunkBytes);
  for (int64_t offset = 0; offset < n; offset += piece) {
    const int64_t len = std::min(piece, n - offset);
    std::byte* p = data + static_cast<size_t>(offset) * es;
    const auto first = [&](int b) { return len * b / size_; };  // block b: [first(b), first(b+1))
    const auto at = [&](int b) { return p + static_cast<size_t>(first(b)) * es; };
    const auto bytes = [&](int b) { return static_cast<size_t>(first(b + 1) - first(b)) * es; };
    std::byte* mine = at(rank_);
    const int64_t count = first(rank_ + 1) - first(rank_);

    // Reduce-scatter: every other rank's copy of my block arrives in its slot.
    PendingMessages phase;
    for (int q = 0; q < size_; ++q)
      if (q != rank_) {
        phase.receive(slot(q), bytes(rank_), q, reduce_tag_, comm_);
        phase.send(at(q), bytes(q), q, reduce_tag_, comm_);
      }
    wait_all(phase, what);
    std::byte* sum = rank_ == 0 ? mine : slot(0);
    for (int q = 1; q < size_; ++q) pt::accumulate(sum, q == rank_ ? mine : slot(q), count, type);
    if (sum != mine) std::copy_n(sum, bytes(rank_), mine);

    // All-gather: my sum to everyone, theirs into place.
    for (int q = 0; q < size_; ++q)
      if (q != rank_) {
        phase.receive(at(q), bytes(q), q, gather_tag_, comm_);
        phase.send(mine, bytes(rank_), q, gather_tag_, comm_);
      }
    wait_all(phase, what);
  }
}

// Waits for every request of `phase` (and empties it), as long as a collective waits; on
// timeout, names the ranks whose messages did not arrive and leaves the communicator unusable.
void MpiCommunicator::wait_all(PendingMessages& phase, std::string_view what) {
  const double waited_s = timeout_s_ + collective_grace_s(timeout_s_);
  const auto deadline = deadline_after(waited_s);
  Backoff backoff;
  std::vector<int> completed(phase.requests.size());
  for (;;) {
    // Completed requests become MPI_REQUEST_NULL; MPI_UNDEFINED: none is left.
    int count = 0;
    const int rc = MPI_Testsome(static_cast<int>(phase.requests.size()), phase.requests.data(),
                                &count, completed.data(), MPI_STATUSES_IGNORE);
    check(rc, fmt::format("all_reduce '{}' ({})", what, describe_));
    if (count == MPI_UNDEFINED) break;
    if (Clock::now() >= deadline) {
      std::vector<int> late;
      for (size_t i = 0; i < phase.requests.size(); ++i)
        if (phase.from[i] >= 0 && phase.requests[i] != MPI_REQUEST_NULL)
          late.push_back(world_ranks_[static_cast<size_t>(phase.from[i])]);
      std::string message = fmt::format(
          "{}: {}: all_reduce timed out after {:g} s waiting for world rank{} {}", what, describe_,
          waited_s, late.size() == 1 ? "" : "s",
          late.empty() ? std::string("(the sends did not complete)") : format_ranks(late));
      abandon(phase.requests, message);
      throw TimeoutError(message);
    }
    backoff.pause();
  }
  phase.requests.clear();
  phase.from.clear();
}

}  // namespace pt::mpi_detail
