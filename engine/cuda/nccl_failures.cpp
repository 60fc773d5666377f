// The NCCL communicator's errors: arguments it refuses (UsageError, nothing sent), and failures
// that break it: a timeout or an NCCL or CUDA error marks the state broken, aborts every lane and
// drops their sends, and every later call says so.
#include <climits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/cuda/nccl_internal.h"

namespace pt::cuda::nccl_detail {

std::string nccl_error(ncclResult_t result, ncclComm_t comm) {
  std::string text =
      fmt::format("{} (ncclResult_t {})", ncclGetErrorString(result), static_cast<int>(result));
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text += fmt::format(": {}", last);
  return text;
}

void State::check_rank(int r, std::string_view what, std::string_view role) const {
  if (r < 0 || r >= size)
    throw UsageError(fmt::format("{}: {}: {} {} is not a rank of this group (0..{})", what,
                                 describe, role, r, size - 1));
}

void State::check_peer(int r, std::string_view what, std::string_view role) const {
  check_rank(r, what, role);
  if (r == rank)
    throw UsageError(
        fmt::format("{}: {}: {} {} is this rank; NCCL cannot send a message to its own rank", what,
                    describe, role, r));
}

void State::check_tag(int tag, std::string_view what) const {
  if (tag < 0)
    throw UsageError(
        fmt::format("{}: {}: tag {} is outside [0, {}]", what, describe, tag, INT_MAX));
}

std::string State::others() const {
  std::vector<int> ranks;
  for (int r = 0; r < size; ++r)
    if (r != rank) ranks.push_back(world_ranks[static_cast<size_t>(r)]);
  if (ranks.empty()) return "no other rank (the group has one rank)";
  if (ranks.size() == 1) return fmt::format("world rank {}", ranks[0]);
  return fmt::format("world ranks {} (at least one of them did not arrive)", format_ranks(ranks));
}

void State::throw_if_broken(std::string_view what) const {
  if (!broken.empty())
    throw UsageError(fmt::format(
        "{}: {}: this communicator is unusable after an earlier failure ({}); end the job "
        "instead of continuing",
        what, describe, broken));
}

void State::fail(const std::string& message, bool timeout) {
  if (broken.empty()) broken = message;
  abort_all();
  if (timeout) throw TimeoutError(message + "; the communicator was aborted");
  throw std::runtime_error(message + "; the communicator was aborted");
}

void State::fail_nccl(ncclResult_t result, ncclComm_t comm, std::string_view call,
                      std::string_view what) {
  fail(fmt::format("{}: {}: {} failed: {}", what, who, call, nccl_error(result, comm)), false);
}

void State::cuda_call(cudaError_t e, const char* call, std::string_view what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  fail(fmt::format("{}: {}: {} failed with {}: {}", what, who, call, error_name(e),
                   cudaGetErrorString(e)),
       false);
}

void State::drop(SendOp& op) {
  if (op.stage != SendOp::Stage::complete) op.stage = SendOp::Stage::failed;
  pinned_pool().release(gpu, std::exchange(op.staging, Pinned{}));
}

void State::abort_all() {
  for (Lane* lane : lanes()) {
    if (ncclComm_t comm = load_comm(lane->comm)) (void)ncclCommAbort(comm);
    lane->comm = nullptr;
    lane->enqueue_pending = false;
    if (lane->enqueuing) drop(*lane->enqueuing);
    lane->enqueuing.reset();
    for (auto& op : lane->queued) drop(*op);
    for (auto& op : lane->launched) drop(*op);
    lane->queued.clear();
    lane->launched.clear();
  }
  if (ncclComm_t orphan = load_comm(pending_comm))
    (void)ncclCommAbort(orphan);  // after its parent's abort
  pending_comm = nullptr;
}

}  // namespace pt::cuda::nccl_detail
