// The MPI communicator's messages: isend (a request the caller waits for) and recv, whose
// timeout cancels the receive, or gives it up when the message had begun to arrive.
#include <string>

#include <fmt/format.h>

#include "engine/comm/mpi_communicator.h"
#include "engine/core/error.h"

namespace pt::mpi_detail {
namespace {

// How long a cancelled receive may take to report that it was cancelled (locally: at once) or
// that it completed after all.
constexpr double kCancelGraceSeconds = 2.0;

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

}  // namespace

std::unique_ptr<CommRequest> MpiCommunicator::isend(const void* data, size_t bytes, int dst,
                                                    int tag) {
  check_rank(dst, "isend", "destination");
  check_tag(tag, "isend");
  const int n = to_int(static_cast<int64_t>(bytes), "isend", "bytes");
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Isend(data, n, MPI_BYTE, dst, tag, comm_, &request), "MPI_Isend");
  return std::make_unique<MpiSendRequest>(request, describe_, world_ranks_[dst], tag, bytes,
                                          timeout_s_);
}

void MpiCommunicator::recv(void* data, size_t bytes, int src, int tag, std::string_view what) {
  check_rank(src, what, "source");
  check_tag(tag, what);
  const int n = to_int(static_cast<int64_t>(bytes), what, "bytes");
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Irecv(data, n, MPI_BYTE, src, tag, comm_, &request), "MPI_Irecv");
  MPI_Status status;
  int rc = MPI_SUCCESS;
  if (!poll_until(request, deadline_after(timeout_s_), &status, &rc)) {
    const std::string message =
        fmt::format("{}: {}: recv timed out after {:g} s waiting for world rank {} (tag {})", what,
                    describe_, timeout_s_, world_ranks_[src], tag);
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

}  // namespace pt::mpi_detail
