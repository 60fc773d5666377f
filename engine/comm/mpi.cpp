// MPI communicators (see mpi.h). Each blocking operation starts the nonblocking MPI call and polls
// it with MPI_Test until it completes or its deadline passes; MPI errors come back as return codes
// (MPI_ERRORS_RETURN) and are thrown as exceptions with MPI's own text.
#include "engine/comm/mpi.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <span>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "engine/comm/backoff.h"
#include "engine/core/error.h"

namespace pt {
namespace {

using Clock = std::chrono::steady_clock;

// Largest piece of an all-reduce (and broadcast) handed to MPI at once. A single all-reduce of
// >= 32 MiB was measured 10x slower per byte on our machines than the same bytes in 4 MiB pieces.
constexpr size_t kChunkBytes = size_t{4} << 20;
// All-reduces of at least this many bytes go by point-to-point messages (pairwise_all_reduce);
// smaller ones by MPI_Iallreduce, whose few messages cost less latency.
constexpr size_t kPairwiseMinBytes = size_t{256} << 10;
// How long a cancelled receive may take to report that it was cancelled (locally: at once) or
// that it completed after all.
constexpr double kCancelGraceSeconds = 2.0;

// A collective waits for every rank of its group, and a rank can be late because it waits for a
// third one (replica 1's last stage waits for its first, which died, while replica 0's last stage
// waits for it in the gradient all-reduce). The rank that waits for the dead one directly names
// it; so a collective waits a little longer than a point-to-point receive (half the timeout, at
// most 2 s), and the job ends with the error that names the rank which really stopped (seen
// under ASan with 4 processes on 2 cores, where the two deadlines fell within milliseconds).
double collective_grace_s(double timeout_s) { return std::min(2.0, 0.5 * timeout_s); }

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return fmt::format("MPI error code {}", code);
  return std::string(text, static_cast<size_t>(length));
}

void check(int rc, std::string_view call) {
  if (rc != MPI_SUCCESS)
    throw std::runtime_error(fmt::format("{} failed: {}", call, mpi_error_text(rc)));
}

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

// Polls `request` until it completes (returns true; MPI_Test's return code in *rc) or `deadline`
// passes (returns false; the request is still active).
bool poll_until(MPI_Request& request, Clock::time_point deadline, MPI_Status* status, int* rc) {
  Backoff backoff;
  for (;;) {
    int done = 0;
    *rc = MPI_Test(&request, &done, status);
    if (done || *rc != MPI_SUCCESS) return true;
    if (Clock::now() >= deadline) return false;
    backoff.pause();
  }
}

MPI_Datatype mpi_type(ElemType t) {
  switch (t) {
    case ElemType::f32: return MPI_FLOAT;
    case ElemType::f64: return MPI_DOUBLE;
    case ElemType::i64: return MPI_INT64_T;
  }
  throw UsageError(fmt::format("unknown ElemType {}", static_cast<int>(t)));
}

// A pending MPI_Isend.
class MpiSendRequest final : public CommRequest {
 public:
  MpiSendRequest(MPI_Request request, std::string who, int peer_world, int tag, size_t bytes,
                 double timeout_s)
      : request_(request),
        who_(std::move(who)),
        peer_world_(peer_world),
        tag_(tag),
        bytes_(bytes),
        timeout_s_(timeout_s) {}
  ~MpiSendRequest() override {
    // Still pending: let it finish in the background (its buffer must outlive it, as for any send).
    if (request_ != MPI_REQUEST_NULL && !mpi_finalized()) MPI_Request_free(&request_);
  }

  bool test() override {
    if (request_ == MPI_REQUEST_NULL) return true;
    int done = 0;
    check(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), "MPI_Test (isend)");
    return done != 0;
  }

  void wait(std::string_view what) override {
    if (request_ == MPI_REQUEST_NULL) return;
    int rc = MPI_SUCCESS;
    if (!poll_until(request_, deadline_after(timeout_s_), MPI_STATUS_IGNORE, &rc))
      throw TimeoutError(fmt::format(
          "{}: {}: send of {} bytes (tag {}) to world rank {} did not complete within {:g} s", what,
          who_, bytes_, tag_, peer_world_, timeout_s_));
    check(rc, fmt::format("{}: MPI_Isend to world rank {}", what, peer_world_));
  }

 private:
  MPI_Request request_;
  std::string who_;
  int peer_world_;
  int tag_;
  size_t bytes_;
  double timeout_s_;
};

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed in the destructor).
  MpiCommunicator(MPI_Comm comm, std::string name, double timeout_s)
      : comm_(comm), name_(std::move(name)), timeout_s_(timeout_s) {
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
    check(MPI_Comm_group(comm_, &group), "MPI_Comm_group");
    check(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group");
    std::vector<int> ranks(size_);
    std::iota(ranks.begin(), ranks.end(), 0);
    world_ranks_.resize(size_);
    check(MPI_Group_translate_ranks(group, size_, ranks.data(), world, world_ranks_.data()),
          "MPI_Group_translate_ranks");
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    void* tag_ub = nullptr;
    int found = 0;
    check(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tag_ub, &found), "MPI_Comm_get_attr(MPI_TAG_UB)");
    const int top = found ? *static_cast<int*>(tag_ub) : 32767;  // the least the standard allows
    // The two highest tags carry pairwise_all_reduce's messages: never a caller's.
    reduce_tag_ = top - 1;
    gather_tag_ = top;
    max_tag_ = top - 2;
    describe_ = fmt::format("mpi '{}': rank {} of {} (world ranks {})", name_, rank_, size_,
                            format_ranks(world_ranks_));
  }

  ~MpiCommunicator() override {
    if (mpi_finalized()) return;
    // Collectives abandoned by a timeout can be neither cancelled nor freed; testing them releases
    // the ones that completed since. MPI_Comm_free waits for nothing: pending ones stay MPI's.
    for (MPI_Request& r : abandoned_) {
      int done = 0;
      MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    }
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int world_rank(int r) const override {
    check_rank(r, "world_rank", "rank");
    return world_ranks_[r];
  }
  std::string describe() const override { return describe_; }
  double timeout_s() const override { return timeout_s_; }
  int max_tag() const override { return max_tag_; }

  // ---- collectives --------------------------------------------------------------------------
  void all_reduce(void* data, int64_t n, ElemType type, ReduceOp op,
                  std::string_view what) override {
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

  void reduce_scatter(const float* in, float* out, int64_t count, ReduceOp op,
                      std::string_view what) override {
    throw_if_broken(what);
    const int n = to_int(count, what, "elements per rank");
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ireduce_scatter_block(in, out, n, MPI_FLOAT, MPI_SUM, comm_, &request),
          "MPI_Ireduce_scatter_block");
    wait_collective(request, "reduce_scatter", what);
    if (op == ReduceOp::mean) divide_by_ranks(out, count, ElemType::f32, size_);
  }

  void all_gather(const void* in, void* out, size_t bytes, std::string_view what) override {
    throw_if_broken(what);
    const int n = to_int(static_cast<int64_t>(bytes), what, "bytes per rank");
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallgather(in, n, MPI_BYTE, out, n, MPI_BYTE, comm_, &request), "MPI_Iallgather");
    wait_collective(request, "all_gather", what);
  }

  void broadcast(void* data, size_t bytes, int root, std::string_view what) override {
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

  void barrier(std::string_view what) override {
    throw_if_broken(what);
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier");
    wait_collective(request, "barrier", what);
  }

  // ---- point to point -----------------------------------------------------------------------
  std::unique_ptr<CommRequest> isend(const void* data, size_t bytes, int dst, int tag) override {
    check_rank(dst, "isend", "destination");
    check_tag(tag, "isend");
    const int n = to_int(static_cast<int64_t>(bytes), "isend", "bytes");
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Isend(data, n, MPI_BYTE, dst, tag, comm_, &request), "MPI_Isend");
    return std::make_unique<MpiSendRequest>(request, describe_, world_ranks_[dst], tag, bytes,
                                            timeout_s_);
  }

  void recv(void* data, size_t bytes, int src, int tag, std::string_view what) override {
    check_rank(src, what, "source");
    check_tag(tag, what);
    const int n = to_int(static_cast<int64_t>(bytes), what, "bytes");
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Irecv(data, n, MPI_BYTE, src, tag, comm_, &request), "MPI_Irecv");
    MPI_Status status;
    int rc = MPI_SUCCESS;
    if (!poll_until(request, deadline_after(timeout_s_), &status, &rc)) {
      const std::string message =
          fmt::format("{}: {}: recv timed out after {:g} s waiting for world rank {} (tag {})",
                      what, describe_, timeout_s_, world_ranks_[src], tag);
      // A receive can be cancelled; if the message arrived meanwhile, the cancel fails and the
      // receive completed normally. A message already being received (a large one, whose sender
      // died mid-transfer) can be neither cancelled nor completed: MPI_Wait would block forever,
      // so wait with a deadline and, past it, give the request up as a timed-out collective is.
      check(MPI_Cancel(&request), "MPI_Cancel");
      if (!poll_until(request, deadline_after(kCancelGraceSeconds), &status, &rc)) {
        abandon({&request, 1}, message);
        throw TimeoutError(message + " (the message had begun to arrive and stopped)");
      }
      int cancelled = 0;
      check(MPI_Test_cancelled(&status, &cancelled), "MPI_Test_cancelled");
      if (cancelled) throw TimeoutError(message);
    }
    int error_class = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &error_class);
    if (error_class == MPI_ERR_TRUNCATE)
      throw UsageError(
          fmt::format("{}: {}: the message from world rank {} (tag {}) is larger than the {} bytes "
                      "the receive expects",
                      what, describe_, world_ranks_[src], tag, bytes));
    check(rc, fmt::format("{}: MPI_Irecv from world rank {}", what, world_ranks_[src]));
    int received = 0;
    check(MPI_Get_count(&status, MPI_BYTE, &received), "MPI_Get_count");
    if (received != n)
      throw UsageError(
          fmt::format("{}: {}: the message from world rank {} (tag {}) has {} bytes but the "
                      "receive expects {} bytes",
                      what, describe_, world_ranks_[src], tag, received, bytes));
  }

  // ---- groups -------------------------------------------------------------------------------
  std::unique_ptr<Communicator> split(int colour, int key, std::string name) override {
    throw_if_broken(name);
    if (colour < 0)
      throw UsageError(fmt::format("split '{}': {}: colour {} is negative; colours are >= 0", name,
                                   describe_, colour));
    // MPI_Comm_split has no nonblocking form: first meet in an all-gather with a deadline, so a
    // missing rank shows as a TimeoutError; once everyone is there, the split cannot hang.
    const int mine[2] = {colour, key};
    std::vector<int> everyone(2 * static_cast<size_t>(size_));
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallgather(mine, 2, MPI_INT, everyone.data(), 2, MPI_INT, comm_, &request),
          "MPI_Iallgather");
    wait_collective(request, "split", name);
    MPI_Comm part = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, colour, key, &part), "MPI_Comm_split");
    return std::make_unique<MpiCommunicator>(part, std::move(name), timeout_s_);
  }

 private:
  // A large all-reduce as a reduce-scatter and an all-gather by point-to-point messages, in pieces
  // of size_ blocks of at most kChunkBytes. Rank b sums block b of every rank in rank order
  // ((x0 + x1) + x2 ..., as the in-process group does) and sends the sum to all the others, so
  // every rank holds the same bits. Each rank sends and receives (R - 1)/R of the bytes twice, as
  // a ring does, in R - 1 messages at once; on one machine Open MPI's shared-memory transport
  // copies each large message once (single-copy CMA, btl_vader_single_copy_mechanism's
  // default). 16 MiB between 2 processes here: 3.4-4.6 ms this way, 5.4-14 ms as MPI_Iallreduce
  // in 4 MiB pieces (libnbc's schedule advances only inside our MPI_Test calls).
  void pairwise_all_reduce(std::byte* data, int64_t n, ElemType type, std::string_view what) {
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

  // The requests of one phase of pairwise_all_reduce, and for each receive the rank it waits for.
  struct PendingMessages {
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

  // Waits for every request of `phase` (and empties it), as long as a collective waits; on
  // timeout, names the ranks whose messages did not arrive and leaves the communicator unusable.
  void wait_all(PendingMessages& phase, std::string_view what) {
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
            "{}: {}: all_reduce timed out after {:g} s waiting for world rank{} {}", what,
            describe_, waited_s, late.size() == 1 ? "" : "s",
            late.empty() ? std::string("(the sends did not complete)") : format_ranks(late));
        abandon(phase.requests, message);
        throw TimeoutError(message);
      }
      backoff.pause();
    }
    phase.requests.clear();
    phase.from.clear();
  }

  // Waits for a collective; on timeout the communicator becomes unusable (see mpi.h).
  void wait_collective(MPI_Request& request, std::string_view op, std::string_view what) {
    int rc = MPI_SUCCESS;
    const double waited_s = timeout_s_ + collective_grace_s(timeout_s_);
    if (poll_until(request, deadline_after(waited_s), MPI_STATUS_IGNORE, &rc)) {
      check(rc, fmt::format("{} '{}' ({})", op, what, describe_));
      return;
    }
    std::string waited_for;
    if (size_ == 2) {
      waited_for = fmt::format("world rank {}", world_ranks_[1 - rank_]);
    } else {
      std::vector<int> others;
      for (int r = 0; r < size_; ++r)
        if (r != rank_) others.push_back(world_ranks_[r]);
      waited_for =
          fmt::format("world ranks {} (at least one of them did not arrive)", format_ranks(others));
    }
    std::string message = fmt::format("{}: {}: {} timed out after {:g} s waiting for {}", what,
                                      describe_, op, waited_s, waited_for);
    abandon({&request, 1}, message);
    throw TimeoutError(message);
  }

  // Gives up pending requests after a timeout: MPI may still complete them (the destructor
  // tests them), and the communicator stays unusable with `why` (throw_if_broken).
  void abandon(std::span<const MPI_Request> requests, const std::string& why) {
    std::lock_guard lock(mutex_);
    for (MPI_Request r : requests)
      if (r != MPI_REQUEST_NULL) abandoned_.push_back(r);
    if (broken_.empty()) broken_ = why;
  }

  void throw_if_broken(std::string_view what) const {
    std::lock_guard lock(mutex_);
    if (!broken_.empty())
      throw UsageError(fmt::format(
          "{}: {}: this communicator is unusable after an earlier timeout ({}); end the job "
          "(MpiRuntime::abort) instead of continuing",
          what, describe_, broken_));
  }

  void check_rank(int r, std::string_view what, std::string_view role) const {
    if (r < 0 || r >= size_)
      throw UsageError(fmt::format("{}: {}: {} {} is not a rank of this group (0..{})", what,
                                   describe_, role, r, size_ - 1));
  }
  void check_tag(int tag, std::string_view what) const {
    if (tag < 0 || tag > max_tag_)
      throw UsageError(
          fmt::format("{}: {}: tag {} is outside [0, {}]", what, describe_, tag, max_tag_));
  }
  int to_int(int64_t n, std::string_view what, std::string_view unit) const {
    if (n < 0 || n > INT_MAX)
      throw UsageError(fmt::format("{}: {}: {} {} is outside what one MPI call takes (0..{})", what,
                                   describe_, n, unit, INT_MAX));
    return static_cast<int>(n);
  }

  MPI_Comm comm_;
  std::string name_;
  double timeout_s_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> world_ranks_;
  int max_tag_ = 32767;
  int reduce_tag_ = 32766, gather_tag_ = 32767;  // pairwise_all_reduce's two phases
  std::vector<std::byte> scratch_;               // pairwise_all_reduce's received blocks
  std::string describe_;
  mutable std::mutex mutex_;  // the fields below: a compute and a reduction thread may share us
  std::vector<MPI_Request> abandoned_;
  std::string broken_;
};

std::string_view thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

}  // namespace

MpiRuntime::MpiRuntime() {
  int initialized = 0;
  check(MPI_Initialized(&initialized), "MPI_Initialized");
  if (initialized)
    throw UsageError(
        "MPI is already initialised: create one MpiRuntime per process, before any other use of "
        "MPI");
  if (mpi_finalized())
    throw UsageError("MPI was finalised already and cannot be initialised again in this process");
  int provided = MPI_THREAD_SINGLE;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    throw std::runtime_error(fmt::format(
        "the MPI library provides only {}; pipetrain needs MPI_THREAD_MULTIPLE because a compute "
        "thread and a gradient-reduction thread both call MPI (use an MPI built with thread "
        "support)",
        thread_level_name(provided)));
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
}

MpiRuntime::~MpiRuntime() {
  if (!mpi_finalized()) MPI_Finalize();
}

void MpiRuntime::abort(int code) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized && !mpi_finalized()) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; without MPI, end this process alone
}

std::unique_ptr<Communicator> mpi_world(double timeout_s) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized || mpi_finalized())
    throw UsageError("mpi_world: MPI is not running; create a pt::MpiRuntime in main first");
  if (!(timeout_s > 0))
    throw UsageError(fmt::format("mpi_world: timeout {} s must be > 0", timeout_s));
  MPI_Comm world = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Comm_idup(MPI_COMM_WORLD, &world, &request), "MPI_Comm_idup");
  int rc = MPI_SUCCESS;
  if (!poll_until(request, deadline_after(timeout_s), MPI_STATUS_IGNORE, &rc)) {
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    throw TimeoutError(
        fmt::format("mpi_world: world rank {} of {} timed out after {:g} s waiting for the other "
                    "ranks to start "
                    "(at least one of them did not call mpi_world)",
                    rank, size, timeout_s));
  }
  check(rc, "MPI_Comm_idup");
  return std::make_unique<MpiCommunicator>(world, "world", timeout_s);
}

}  // namespace pt
