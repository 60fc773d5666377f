// How the NCCL communicator issues its NCCL calls and waits for them (nccl_internal.h draws the
// design): sends queued per lane and handed to NCCL as it accepts them, one blocking call with a
// deadline (State::run), and a lane's nonblocking creation. Kept apart from the operations, which
// only say what to call, and from the failures (nccl_failures.cpp), which end all of this.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/comm/backoff.h"
#include "engine/cuda/nccl_internal.h"

namespace pt::cuda::nccl_detail {

std::mutex& nccl_mutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}

bool State::event_done(cudaEvent_t event, std::string_view what) {
  const cudaError_t e = cudaEventQuery(event);
  if (e == cudaSuccess) return true;
  if (e == cudaErrorNotReady) return false;
  cuda_call(e, "cudaEventQuery", what);
  return false;
}

void State::check_async(Lane& lane, std::string_view what) {
  if (lane.comm == nullptr) return;
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(lane.comm, &state);
  if (r != ncclSuccess) fail_nccl(r, lane.comm, "ncclCommGetAsyncError", what);
  if (state == ncclInProgress) return;
  if (state != ncclSuccess)
    fail(fmt::format("{}: {}: NCCL reported an error on its {} communicator: {}", what, who,
                     lane.role, nccl_error(state, lane.comm)),
         false);
  if (lane.enqueue_pending && lane.enqueuing) {
    lane.enqueue_pending = false;
    lane.launched.push_back(std::move(lane.enqueuing));
    SendOp& op = *lane.launched.back();
    op.stage = SendOp::Stage::launched;
    cuda_call(cudaEventRecord(op.done.get(), lane.stream), "cudaEventRecord", what);
  }
}

void State::launch_queued(Lane& lane, std::string_view what) {
  while (lane.comm != nullptr && !lane.enqueue_pending && !lane.queued.empty()) {
    SendOp& op = *lane.queued.front();  // stays queued until NCCL took it: an abort then drops it
    if (op.ready.get() != nullptr)
      cuda_call(cudaStreamWaitEvent(lane.stream, op.ready.get(), 0), "cudaStreamWaitEvent", what);
    const ncclResult_t r =
        ncclSend(op.buffer, op.bytes, ncclUint8, op.peer, lane.comm, lane.stream);
    if (r != ncclSuccess && r != ncclInProgress) fail_nccl(r, lane.comm, "ncclSend", what);
    std::shared_ptr<SendOp> taken = std::move(lane.queued.front());
    lane.queued.pop_front();
    if (r == ncclInProgress) {
      taken->stage = SendOp::Stage::enqueuing;
      lane.enqueue_pending = true;
      lane.enqueuing = std::move(taken);
      return;
    }
    taken->stage = SendOp::Stage::launched;
    lane.launched.push_back(std::move(taken));
    cuda_call(cudaEventRecord(op.done.get(), lane.stream), "cudaEventRecord", what);
  }
}

void State::reap(Lane& lane, std::string_view what) {
  while (!lane.launched.empty() && event_done(lane.launched.front()->done.get(), what)) {
    SendOp& op = *lane.launched.front();
    op.stage = SendOp::Stage::complete;
    pinned_pool().release(gpu, std::exchange(op.staging, Pinned{}));
    lane.launched.pop_front();
  }
}

void State::progress(std::string_view what) {
  for (Lane* lane : lanes()) {
    check_async(*lane, what);
    launch_queued(*lane, what);
    reap(*lane, what);
  }
}

std::string State::earlier_sends(const Lane& lane) const {
  std::vector<int> peers;
  const auto add = [&](const std::shared_ptr<SendOp>& op) {
    if (op && std::find(peers.begin(), peers.end(), op->peer_world) == peers.end())
      peers.push_back(op->peer_world);
  };
  add(lane.enqueuing);
  for (const auto& op : lane.launched) add(op);
  for (const auto& op : lane.queued) add(op);
  if (peers.empty()) return "";
  return fmt::format(
      "; this rank's earlier sends to world ranks {} on the same NCCL communicator had not "
      "completed, "
      "and NCCL runs a communicator's operations in order",
      format_ranks(peers));
}

void State::run(Lane& lane, bool after_compute, std::string_view op, std::string_view what,
                const std::function<ncclResult_t(ncclComm_t, cudaStream_t)>& call,
                const std::function<std::string()>& waited_for) {
  const std::string where = fmt::format("{}: {}", what, who);
  Event ready = after_compute ? Event(where) : Event(), done(where);
  Backoff backoff(kPollSleep);
  bool issued = false, enqueued = false, compute_done = !after_compute;
  Clock::time_point deadline = deadline_after(timeout_s);
  for (;;) {
    {
      std::lock_guard lock(nccl_mutex());
      throw_if_broken(what);
      progress(what);
      if (!issued && lane.idle()) {
        if (after_compute) {
          cuda_call(cudaEventRecord(ready.get(), backend.compute_stream()), "cudaEventRecord",
                    what);
          cuda_call(cudaStreamWaitEvent(lane.stream, ready.get(), 0), "cudaStreamWaitEvent", what);
        }
        const ncclResult_t r = call(lane.comm, lane.stream);
        issued = true;
        if (r == ncclInProgress) {
          lane.enqueue_pending = true;  // ours to finish: `enqueuing` stays null
        } else if (r != ncclSuccess) {
          fail_nccl(r, lane.comm, op, what);
        } else {
          cuda_call(cudaEventRecord(done.get(), lane.stream), "cudaEventRecord", what);
          enqueued = true;
        }
      } else if (issued && !enqueued) {
        ncclResult_t state = ncclSuccess;
        const ncclResult_t r = ncclCommGetAsyncError(lane.comm, &state);
        if (r != ncclSuccess) fail_nccl(r, lane.comm, "ncclCommGetAsyncError", what);
        if (state == ncclSuccess) {  // an error state was already thrown by progress()
          lane.enqueue_pending = false;
          cuda_call(cudaEventRecord(done.get(), lane.stream), "cudaEventRecord", what);
          enqueued = true;
          launch_queued(lane, what);
        }
      }
      if (enqueued) {
        if (!compute_done && event_done(ready.get(), what)) {
          compute_done = true;
          deadline = deadline_after(timeout_s);
        }
        if (compute_done && event_done(done.get(), what)) return;
      }
    }
    if (Clock::now() >= deadline) {
      std::lock_guard lock(nccl_mutex());
      throw_if_broken(what);
      if (enqueued && !compute_done)
        fail(fmt::format(
                 "{}: {}: {} did not start within {:g} s: the work queued before it on cuda:{}'s "
                 "compute "
                 "stream did not finish (this GPU, not another rank, is what it waited for)",
                 what, who, op, timeout_s, gpu),
             true);
      fail(fmt::format("{}: {}: {} timed out after {:g} s waiting for {}{}", what, who, op,
                       timeout_s, waited_for(), earlier_sends(lane)),
           true);
    }
    backoff.pause();
  }
}

void State::finish_lane(Lane& lane, std::string_view what,
                        const std::function<std::string()>& timeout_message) {
  Backoff backoff(kPollSleep);
  const auto deadline = deadline_after(timeout_s);
  for (;;) {
    {
      std::lock_guard lock(nccl_mutex());
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(lane.comm, &state);
      if (r != ncclSuccess) fail_nccl(r, lane.comm, "ncclCommGetAsyncError", what);
      if (state == ncclSuccess) break;
      if (state != ncclInProgress)
        fail(fmt::format("{}: {}: creating the {} NCCL communicator failed: {}", what, who,
                         lane.role, nccl_error(state, lane.comm)),
             false);
    }
    if (Clock::now() >= deadline) {
      std::lock_guard lock(nccl_mutex());
      fail(timeout_message(), true);
    }
    backoff.pause();
  }
  std::lock_guard lock(nccl_mutex());
  int count = 0, user_rank = -1;
  if (const ncclResult_t r = ncclCommCount(lane.comm, &count); r != ncclSuccess)
    fail_nccl(r, lane.comm, "ncclCommCount", what);
  if (const ncclResult_t r = ncclCommUserRank(lane.comm, &user_rank); r != ncclSuccess)
    fail_nccl(r, lane.comm, "ncclCommUserRank", what);
  if (count != size || user_rank != rank)
    fail(fmt::format("{}: {}: NCCL made its {} communicator rank {} of {}, not rank {} of {}", what,
                     who, lane.role, user_rank, count, rank, size),
         false);
  cuda_call(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking),
            "cudaStreamCreateWithFlags", what);
}

ncclComm_t State::take_pending() {
  const ncclComm_t comm = load_comm(pending_comm);
  std::atomic_ref<ncclComm_t>(pending_comm).store(nullptr, std::memory_order_release);
  return comm;
}

void State::open_p2p_lanes(std::string_view what) {
  if (size == 1) return;  // no peers to send to
  for (Lane* lane : {&up, &down}) {
    ncclConfig_t config = nonblocking_config();
    run(
        collectives, false, "ncclCommSplit", what,
        [&](ncclComm_t comm, cudaStream_t) {
          return ncclCommSplit(comm, 0, rank, &pending_comm, &config);
        },
        [&] { return others(); });
    {
      std::lock_guard lock(nccl_mutex());
      lane->comm = take_pending();
      if (lane->comm == nullptr)
        fail(fmt::format("{}: {}: ncclCommSplit finished without a communicator for the {} lane",
                         what, who, lane->role),
             false);
    }
    finish_lane(*lane, what, [&] {
      return fmt::format("{}: {}: the {} NCCL communicator was not ready within {:g} s", what, who,
                         lane->role, timeout_s);
    });
  }
}

}  // namespace pt::cuda::nccl_detail
