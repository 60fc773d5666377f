// MPI communicators (see mpi.h). Each blocking operation starts the nonblocking MPI call and polls
// it with MPI_Test until it completes or its deadline passes; MPI errors come back as return codes
// (MPI_ERRORS_RETURN) and are thrown as exceptions with MPI's own text.
//
// This file: MPI's lifetime, the world, the communicator's construction and split, and the waits
// that give up at a deadline. The operations are in mpi_collectives.cpp and
// mpi_point_to_point.cpp; the class they share is in mpi_communicator.h.
#include "engine/comm/mpi.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <numeric>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "engine/comm/backoff.h"
#include "engine/comm/mpi_communicator.h"
#include "engine/core/error.h"

namespace pt::mpi_detail {

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

// ---- construction and groups ------------------------------------------------------------------

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, double timeout_s)
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

MpiCommunicator::~MpiCommunicator() {
  if (mpi_finalized()) return;
  // Collectives abandoned by a timeout can be neither cancelled nor freed; testing them releases
  // the ones that completed since. MPI_Comm_free waits for nothing: pending ones stay MPI's.
  for (MPI_Request& r : abandoned_) {
    int done = 0;
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
  }
  MPI_Comm_free(&comm_);
}

std::unique_ptr<Communicator> MpiCommunicator::split(int colour, int key, std::string name) {
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

// ---- waits, timeouts and argument checks -------------------------------------------------------

// Waits for a collective; on timeout the communicator becomes unusable (see mpi.h).
void MpiCommunicator::wait_collective(MPI_Request& request, std::string_view op,
                                      std::string_view what) {
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
void MpiCommunicator::abandon(std::span<const MPI_Request> requests, const std::string& why) {
  std::lock_guard lock(mutex_);
  for (MPI_Request r : requests)
    if (r != MPI_REQUEST_NULL) abandoned_.push_back(r);
  if (broken_.empty()) broken_ = why;
}

void MpiCommunicator::throw_if_broken(std::string_view what) const {
  std::lock_guard lock(mutex_);
  if (!broken_.empty())
    throw UsageError(fmt::format(
        "{}: {}: this communicator is unusable after an earlier timeout ({}); end the job "
        "(MpiRuntime::abort) instead of continuing",
        what, describe_, broken_));
}

void MpiCommunicator::check_rank(int r, std::string_view what, std::string_view role) const {
  if (r < 0 || r >= size_)
    throw UsageError(fmt::format("{}: {}: {} {} is not a rank of this group (0..{})", what,
                                 describe_, role, r, size_ - 1));
}
void MpiCommunicator::check_tag(int tag, std::string_view what) const {
  if (tag < 0 || tag > max_tag_)
    throw UsageError(
        fmt::format("{}: {}: tag {} is outside [0, {}]", what, describe_, tag, max_tag_));
}
int MpiCommunicator::to_int(int64_t n, std::string_view what, std::string_view unit) const {
  if (n < 0 || n > INT_MAX)
    throw UsageError(fmt::format("{}: {}: {} {} is outside what one MPI call takes (0..{})", what,
                                 describe_, n, unit, INT_MAX));
  return static_cast<int>(n);
}

}  // namespace pt::mpi_detail

namespace pt {
namespace {

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

using mpi_detail::check;
using mpi_detail::mpi_finalized;
using mpi_detail::MpiCommunicator;
using mpi_detail::poll_until;

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
