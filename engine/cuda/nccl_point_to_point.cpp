// The NCCL communicator's messages: isend (queued on the lane of its direction, handed to NCCL
// when the lane accepts it; a SendRequest waits for it) and recv (one State::run). NCCL has no
// tags: messages between two ranks match in the order they were sent (nccl_communicator.h).
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "engine/comm/backoff.h"
#include "engine/core/error.h"
#include "engine/cuda/nccl_communicator.h"
#include "engine/cuda/nccl_internal.h"

namespace pt::cuda {
namespace nccl_detail {
namespace {

// How long isend() lets NCCL take a send before leaving it queued (see isend).
constexpr auto kEnqueuePatience = std::chrono::milliseconds(2);

class SendRequest final : public CommRequest {
 public:
  SendRequest(std::shared_ptr<State> state, std::shared_ptr<SendOp> op)
      : state_(std::move(state)), op_(std::move(op)) {}

  bool test() override {
    DeviceGuard guard(state_->gpu);
    std::lock_guard lock(nccl_mutex());
    if (op_->stage == SendOp::Stage::complete) return true;
    state_->throw_if_broken("isend (test)");
    state_->progress("isend (test)");
    return op_->stage == SendOp::Stage::complete;
  }

  void wait(std::string_view what) override {
    DeviceGuard guard(state_->gpu);
    Backoff backoff(kPollSleep);
    const auto deadline = deadline_after(state_->timeout_s);
    for (;;) {
      {
        std::lock_guard lock(nccl_mutex());
        if (op_->stage == SendOp::Stage::complete) return;
        state_->throw_if_broken(what);
        state_->progress(what);
        if (op_->stage == SendOp::Stage::complete) return;
      }
      if (Clock::now() >= deadline) {
        std::lock_guard lock(nccl_mutex());
        if (op_->stage == SendOp::Stage::complete) return;
        state_->throw_if_broken(what);
        const bool taken = op_->stage == SendOp::Stage::launched;
        state_->fail(
            fmt::format("{}: {}: send of {} bytes (tag {}) to world rank {} did not complete "
                        "within {:g} s ({})",
                        what, state_->who, op_->bytes, op_->tag, op_->peer_world, state_->timeout_s,
                        taken ? "that rank did not post the matching receive; NCCL ignores tags, "
                                "so it must receive "
                                "this rank's messages in the order they were sent"
                              : "NCCL had not taken it yet: an earlier send on the same NCCL "
                                "communicator, or the "
                                "first connection to that rank, was still waiting for that rank"),
            true);
      }
      backoff.pause();
    }
  }

 private:
  std::shared_ptr<State> state_;
  std::shared_ptr<SendOp> op_;
};

}  // namespace
}  // namespace nccl_detail

using nccl_detail::Clock;
using nccl_detail::nccl_mutex;
using nccl_detail::SendOp;
using nccl_detail::Staging;
using nccl_detail::State;

std::unique_ptr<CommRequest> NcclCommunicator::isend(const void* data, size_t bytes, int dst,
                                                     int tag) {
  State& s = *state_;
  s.check_peer(dst, "isend", "destination");
  s.check_tag(tag, "isend");
  DeviceGuard guard(s.gpu);
  auto op = std::make_shared<SendOp>();
  op->peer = dst;
  op->peer_world = s.world_ranks[static_cast<size_t>(dst)];
  op->tag = tag;
  op->bytes = bytes;
  if (bytes == 0) {  // nothing travels; the matching recv of 0 bytes returns at once as well
    std::lock_guard lock(nccl_mutex());
    s.throw_if_broken("isend");
    op->stage = SendOp::Stage::complete;
    return std::make_unique<nccl_detail::SendRequest>(state_, std::move(op));
  }
  if (data == nullptr)
    throw UsageError(fmt::format("isend: {}: the send buffer is null", s.describe));
  const std::string where = fmt::format("isend: {}", s.who);
  op->done = nccl_detail::Event(where);
  if (nccl_detail::classify(data, s.gpu, "isend", "send", s.who) == nccl_detail::Memory::device) {
    op->buffer = data;
    op->ready = nccl_detail::Event(where);  // the send reads the buffer after its producer finished
    check(cudaEventRecord(op->ready.get(), s.backend.compute_stream()), where, "cudaEventRecord");
  } else {
    {
      std::lock_guard lock(nccl_mutex());
      op->staging = nccl_detail::pinned_pool().acquire(s.gpu, bytes, where);
    }
    std::memcpy(op->staging.host, data, bytes);  // the caller may reuse its buffer at once
    op->buffer = op->staging.device;
  }
  {
    std::lock_guard lock(nccl_mutex());
    if (!s.broken.empty()) s.drop(*op);
    s.throw_if_broken("isend");
    s.lane_to(dst).queued.push_back(op);
    s.progress("isend");  // hands it to NCCL now unless the lane is busy finishing an earlier call
  }
  // NCCL may finish even a plain send on a thread of its own (ncclInProgress); it takes
  // microseconds, and then the sends queued behind it can go too. Waiting that long here puts
  // them on the GPU now rather than at this rank's next call; a send that waits for its peer
  // (the first connection to a rank) stays queued after kEnqueuePatience.
  const auto give_up = Clock::now() + nccl_detail::kEnqueuePatience;
  for (;;) {
    {
      std::lock_guard lock(nccl_mutex());
      if (op->stage != SendOp::Stage::queued && op->stage != SendOp::Stage::enqueuing) break;
      s.progress("isend");
    }
    if (Clock::now() >= give_up) break;
    std::this_thread::yield();
  }
  return std::make_unique<nccl_detail::SendRequest>(state_, std::move(op));
}

void NcclCommunicator::recv(void* data, size_t bytes, int src, int tag, std::string_view what) {
  State& s = *state_;
  s.check_peer(src, what, "source");
  s.check_tag(tag, what);
  DeviceGuard guard(s.gpu);
  {
    std::lock_guard lock(nccl_mutex());
    s.throw_if_broken(what);
  }
  if (bytes == 0) return;
  Staging buffer(s, data, bytes, what, "receive");
  void* p = buffer.place(0);
  s.run(
      s.lane_from(src), buffer.device(), fmt::format("recv of {} bytes", bytes), what,
      [&](ncclComm_t comm, cudaStream_t stream) {
        return ncclRecv(p, bytes, ncclUint8, src, comm, stream);
      },
      [&] {
        return fmt::format(
            "world rank {} (tag {}; NCCL ignores tags, so this is the next message from that rank)",
            s.world_ranks[static_cast<size_t>(src)], tag);
      });
  buffer.store(0, bytes);
}

}  // namespace pt::cuda
