// NCCL communicators (see nccl_communicator.h).
//
// Design. One NcclCommunicator drives up to three NCCL communicators ("lanes") over the same
// ranks, each with a CUDA stream of its own on the backend's GPU: the collective lane (created
// from the unique id, or by split) runs the collectives; the up lane carries messages from a
// lower to a higher rank and the down lane messages from a higher to a lower rank (both split
// from the collective lane at construction, for groups of more than one rank). The lanes exist
// because NCCL runs all kernels of one communicator in issue order, whatever the stream, and a
// send kernel ends only once its receive is posted: with one communicator, two ranks that each
// send and then receive (a pipeline stage sending activation k+1 forward before it receives
// gradient k back, while the next stage sends gradient k before it receives activation k+1)
// would each queue their receive behind a send that waits for the other's receive, a GPU
// deadlock. With a lane per direction, each of those sends waits only for the receive, which is
// not queued behind anything of the other direction. Every operation: an event on the compute
// stream that the lane's stream waits for (the buffer's producer has finished), the NCCL call,
// an event on the lane's stream after it; blocking calls then poll that event and
// ncclCommGetAsyncError with a deadline (spin, then yield, then sleep, as mpi.cpp does), so the
// result is ready when they return. The compute stream is not made to wait for the lane's event:
// the host has seen it complete before returning, so anything queued later runs after it anyway,
// and a compute stream waiting for a lane that is then aborted could hang. The communicators are
// nonblocking (config.blocking = 0) so no NCCL call can hang: a call may return ncclInProgress
// while an NCCL thread finishes it (connecting two ranks at their first message, a split; recent
// NCCL does it for every call), and until ncclCommGetAsyncError reports ncclSuccess nothing else
// may be issued on that communicator. Sends arriving meanwhile wait in a host queue; whichever
// call polls next hands them to NCCL (every call and every request's test()/wait() polls all
// lanes: progress happens inside calls, as in MPI), so isend() never waits for a receiver. Host
// buffers are staged through page-locked blocks that NCCL reads and writes directly. A timeout
// or an NCCL error aborts all lanes (ncclCommAbort makes their kernels exit) and marks the
// communicator broken. One process-wide lock guards every NCCL call and all lane state: NCCL
// forbids concurrent calls on one communicator and on different communicators of one device;
// waits drop it between polls.
#include "engine/cuda/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/comm/backoff.h"
#include "engine/core/error.h"
#include "engine/cuda/runtime_text.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"

namespace pt::cuda {
namespace nccl_detail {
namespace {

using Clock = std::chrono::steady_clock;
// Between polls of a slow NCCL operation (its kernels progress on their own, unlike MPI).
constexpr std::chrono::microseconds kPollSleep{50};

// Largest piece of an all-reduce or broadcast handed to NCCL at once: bounds the page-locked
// staging of a host buffer, and NCCL's bandwidth is near its peak at this size. Pieces depend
// only on the element count, never on the kind of memory, so they match on every rank.
constexpr size_t kChunkBytes = size_t{64} << 20;

// How long isend() lets NCCL take a send before leaving it queued (see isend).
constexpr auto kEnqueuePatience = std::chrono::milliseconds(2);

// One lock for every NCCL call and for the lane state of every communicator of the process.
// Never destroyed: a communicator may be torn down during static destruction.
std::mutex& nccl_mutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}

// NCCL's text for a result, with its last error message (the detail, when there is one).
std::string nccl_error(ncclResult_t result, ncclComm_t comm) {
  std::string text =
      fmt::format("{} (ncclResult_t {})", ncclGetErrorString(result), static_cast<int>(result));
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text += fmt::format(": {}", last);
  return text;
}

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // calls return ncclInProgress instead of waiting: every wait has a deadline
  config.splitShare = 0;  // a lane shares nothing with its parent, kernel ordering included
  return config;
}

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

// An NCCL communicator handle written by an NCCL thread (the target of a nonblocking init or
// split) is read through this.
ncclComm_t load_comm(ncclComm_t& slot) {
  return std::atomic_ref<ncclComm_t>(slot).load(std::memory_order_acquire);
}

class Event {
 public:
  Event() = default;
  explicit Event(const std::string& where) {
    check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), where,
          "cudaEventCreateWithFlags");
  }
  ~Event() {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);  // fine while a record is pending
  }
  Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  Event& operator=(Event&& other) noexcept {
    if (this != &other) {
      if (event_ != nullptr) (void)cudaEventDestroy(event_);
      event_ = std::exchange(other.event_, nullptr);
    }
    return *this;
  }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// ---- page-locked staging for host buffers ------------------------------------------------------

struct Pinned {
  std::byte* host = nullptr;
  void* device = nullptr;  // the address NCCL's kernels use (the same as `host` with UVA)
  size_t bytes = 0;
};

// Blocks are reused and never freed: freeing page-locked memory may synchronise the whole
// device, which in a destructor could wait forever behind another communicator's stuck kernel.
// Guarded by nccl_mutex(); one free list per GPU (a block's device address is per device).
class PinnedPool {
 public:
  Pinned acquire(int gpu, size_t bytes, const std::string& where) {
    std::vector<Pinned>& free = free_[gpu];
    auto best = free.end();
    for (auto it = free.begin(); it != free.end(); ++it)
      if (it->bytes >= bytes && (best == free.end() || it->bytes < best->bytes)) best = it;
    if (best != free.end()) {
      const Pinned block = *best;
      free.erase(best);
      return block;
    }
    constexpr size_t kMiB = size_t{1} << 20;
    const size_t size = bytes <= kMiB ? std::max<size_t>(4096, std::bit_ceil(bytes))
                                      : (bytes + kMiB - 1) / kMiB * kMiB;
    void* host = nullptr;
    check(cudaHostAlloc(&host, size, cudaHostAllocPortable | cudaHostAllocMapped), where,
          "cudaHostAlloc (page-locked staging for a host buffer)");
    void* device = nullptr;
    check(cudaHostGetDevicePointer(&device, host, 0), where, "cudaHostGetDevicePointer");
    return Pinned{static_cast<std::byte*>(host), device, size};
  }
  void release(int gpu, Pinned block) {
    if (block.host != nullptr) free_[gpu].push_back(block);
  }

 private:
  std::map<int, std::vector<Pinned>> free_;
};

PinnedPool& pinned_pool() {
  static auto* pool = new PinnedPool;
  return *pool;
}

// Device memory of this GPU (or managed memory) goes to NCCL as it is; host memory is staged.
enum class Memory { device, host };

Memory classify(const void* p, int gpu, std::string_view what, std::string_view role,
                const std::string& who) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    (void)cudaGetLastError();  // runtimes that reject unregistered host memory
    return Memory::host;
  }
  switch (attributes.type) {
    case cudaMemoryTypeDevice:
      if (attributes.device != gpu)
        throw UsageError(
            fmt::format("{}: {}: the {} buffer is memory of cuda:{}, but this communicator runs on "
                        "cuda:{}; NCCL takes memory of its own GPU (or host memory)",
                        what, who, role, attributes.device, gpu));
      return Memory::device;
    case cudaMemoryTypeManaged: return Memory::device;
    default: return Memory::host;  // pageable or page-locked host memory
  }
}

// ---- lanes and their sends ---------------------------------------------------------------------

struct SendOp {
  enum class Stage { queued, enqueuing, launched, complete, failed };
  int peer = 0;        // group rank
  int peer_world = 0;  // for messages
  int tag = 0;
  size_t bytes = 0;
  const void* buffer = nullptr;  // what NCCL reads: the caller's device memory, or `staging`
  Pinned staging;                // the caller's host bytes, copied at isend
  Event ready;                   // on the compute stream at isend (device memory only)
  Event done;                    // on the lane's stream after the send
  Stage stage = Stage::queued;
};

struct Lane {
  explicit Lane(const char* role_) : role(role_) {}
  const char* role;  // in messages
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  // The last NCCL call returned ncclInProgress: an NCCL thread is finishing it, and nothing else
  // may be issued on `comm` or queued on `stream` until ncclCommGetAsyncError says ncclSuccess.
  // `enqueuing` is that call when it was a send; null when a blocking call, which finishes it
  // itself, made it.
  bool enqueue_pending = false;
  std::shared_ptr<SendOp> enqueuing;
  std::deque<std::shared_ptr<SendOp>> queued;  // sends NCCL has not been given yet
  std::deque<std::shared_ptr<SendOp>>
      launched;  // given to NCCL, completion not yet seen (in order)

  bool idle() const { return !enqueue_pending && queued.empty(); }
};

}  // namespace

// ---- the state shared by a communicator and its send requests -----------------------------------

struct State {
  State(CudaBackend& backend_, double timeout, std::string name_, int rank_, int size_,
        std::vector<int> world)
      : backend(backend_),
        gpu(backend_.gpu()),
        timeout_s(timeout),
        name(std::move(name_)),
        rank(rank_),
        size(size_),
        world_ranks(std::move(world)) {
    describe = fmt::format("nccl '{}': rank {} of {} (world ranks {}) on cuda:{}", name, rank, size,
                           format_ranks(world_ranks), gpu);
    who = fmt::format("world rank {} ({})", world_ranks[static_cast<size_t>(rank)], describe);
  }

  // Destroys the lanes: ncclCommDestroy when everything finished, else ncclCommAbort (destroy
  // would wait for kernels that may never end). Never throws.
  ~State() {
    int previous = -1;
    const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != gpu &&
                          cudaSetDevice(gpu) == cudaSuccess;
    {
      std::lock_guard lock(nccl_mutex());
      for (Lane* lane : lanes())
        close(*lane);  // the collective lane first: aborting it ends a split in flight
      if (ncclComm_t orphan = load_comm(pending_comm)) (void)ncclCommAbort(orphan);
      for (Lane* lane : lanes()) {
        if (lane->enqueuing) drop(*lane->enqueuing);
        for (auto& op : lane->queued) drop(*op);
        for (auto& op : lane->launched) drop(*op);
      }
    }
    for (Lane* lane : lanes())
      if (lane->stream != nullptr) (void)cudaStreamDestroy(lane->stream);
    (void)cudaGetLastError();
    if (switched) (void)cudaSetDevice(previous);
  }

  State(const State&) = delete;
  State& operator=(const State&) = delete;

  std::array<Lane*, 3> lanes() { return {&collectives, &up, &down}; }
  Lane& lane_to(int peer) { return peer > rank ? up : down; }
  Lane& lane_from(int peer) { return peer < rank ? up : down; }

  // ---- checks (no lock needed: the fields read are immutable) -----------------------------------
  void check_rank(int r, std::string_view what, std::string_view role) const {
    if (r < 0 || r >= size)
      throw UsageError(fmt::format("{}: {}: {} {} is not a rank of this group (0..{})", what,
                                   describe, role, r, size - 1));
  }
  void check_peer(int r, std::string_view what, std::string_view role) const {
    check_rank(r, what, role);
    if (r == rank)
      throw UsageError(
          fmt::format("{}: {}: {} {} is this rank; NCCL cannot send a message to its own rank",
                      what, describe, role, r));
  }
  void check_tag(int tag, std::string_view what) const {
    if (tag < 0)
      throw UsageError(
          fmt::format("{}: {}: tag {} is outside [0, {}]", what, describe, tag, INT_MAX));
  }

  // "world rank 3" or "world ranks 1, 3 (at least one of them did not arrive)".
  std::string others() const {
    std::vector<int> ranks;
    for (int r = 0; r < size; ++r)
      if (r != rank) ranks.push_back(world_ranks[static_cast<size_t>(r)]);
    if (ranks.empty()) return "no other rank (the group has one rank)";
    if (ranks.size() == 1) return fmt::format("world rank {}", ranks[0]);
    return fmt::format("world ranks {} (at least one of them did not arrive)", format_ranks(ranks));
  }

  // ---- everything below runs under nccl_mutex()
  // ---------------------------------------------------
  void throw_if_broken(std::string_view what) const {
    if (!broken.empty())
      throw UsageError(fmt::format(
          "{}: {}: this communicator is unusable after an earlier failure ({}); end the job "
          "instead of continuing",
          what, describe, broken));
  }

  // Marks the communicator broken, aborts every lane and throws `message`.
  [[noreturn]] void fail(const std::string& message, bool timeout) {
    if (broken.empty()) broken = message;
    abort_all();
    if (timeout) throw TimeoutError(message + "; the communicator was aborted");
    throw std::runtime_error(message + "; the communicator was aborted");
  }
  [[noreturn]] void fail_nccl(ncclResult_t result, ncclComm_t comm, std::string_view call,
                              std::string_view what) {
    fail(fmt::format("{}: {}: {} failed: {}", what, who, call, nccl_error(result, comm)), false);
  }
  void cuda_call(cudaError_t e, const char* call, std::string_view what) {
    if (e == cudaSuccess) return;
    (void)cudaGetLastError();
    fail(fmt::format("{}: {}: {} failed with {}: {}", what, who, call, error_name(e),
                     cudaGetErrorString(e)),
         false);
  }

  void drop(SendOp& op) {
    if (op.stage != SendOp::Stage::complete) op.stage = SendOp::Stage::failed;
    pinned_pool().release(gpu, std::exchange(op.staging, Pinned{}));
  }

  // ncclCommAbort makes the lanes' kernels exit, so their staging blocks are free again.
  void abort_all() {
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

  void close(Lane& lane) {
    const ncclComm_t comm = load_comm(lane.comm);
    if (comm == nullptr) return;
    bool clean = constructed && broken.empty() && !lane.enqueue_pending;
    if (clean) {
      ncclResult_t state = ncclSuccess;
      clean = ncclCommGetAsyncError(comm, &state) == ncclSuccess && state == ncclSuccess;
    }
    if (clean && lane.stream != nullptr) clean = cudaStreamQuery(lane.stream) == cudaSuccess;
    (void)(clean ? ncclCommDestroy(comm) : ncclCommAbort(comm));
    lane.comm = nullptr;
  }

  bool event_done(cudaEvent_t event, std::string_view what) {
    const cudaError_t e = cudaEventQuery(event);
    if (e == cudaSuccess) return true;
    if (e == cudaErrorNotReady) return false;
    cuda_call(e, "cudaEventQuery", what);
    return false;
  }

  // Reads the lane's asynchronous state: throws on an NCCL error; finishes a send whose
  // enqueue NCCL completed in the background.
  void check_async(Lane& lane, std::string_view what) {
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

  // Hands queued sends to NCCL while the lane accepts calls.
  void launch_queued(Lane& lane, std::string_view what) {
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

  // Sends complete in the order of their lane's stream.
  void reap(Lane& lane, std::string_view what) {
    while (!lane.launched.empty() && event_done(lane.launched.front()->done.get(), what)) {
      SendOp& op = *lane.launched.front();
      op.stage = SendOp::Stage::complete;
      pinned_pool().release(gpu, std::exchange(op.staging, Pinned{}));
      lane.launched.pop_front();
    }
  }

  void progress(std::string_view what) {
    for (Lane* lane : lanes()) {
      check_async(*lane, what);
      launch_queued(*lane, what);
      reap(*lane, what);
    }
  }

  // "; this rank's earlier sends to world ranks 2 on the same NCCL communicator had not completed
  // ..."
  std::string earlier_sends(const Lane& lane) const {
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

  // ---- the waits (called without the lock)
  // ---------------------------------------------------------

  // Issues one NCCL call on `lane`, after the sends queued there before it, and returns once the
  // GPU finished it. `after_compute`: the call touches device memory, so it first waits for the
  // work queued so far on the compute stream; until that work is done the deadline measures this
  // GPU, afterwards the peers. `waited_for` names, for a timeout, whom the call waited for.
  void run(Lane& lane, bool after_compute, std::string_view op, std::string_view what,
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
            cuda_call(cudaStreamWaitEvent(lane.stream, ready.get(), 0), "cudaStreamWaitEvent",
                      what);
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

  // Waits until the communicator of `lane` finished initialising (nonblocking init or split),
  // then checks it and gives the lane its stream.
  void finish_lane(Lane& lane, std::string_view what,
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
      fail(fmt::format("{}: {}: NCCL made its {} communicator rank {} of {}, not rank {} of {}",
                       what, who, lane.role, user_rank, count, rank, size),
           false);
    cuda_call(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking),
              "cudaStreamCreateWithFlags", what);
  }

  // The communicator a finished split wrote into `pending_comm`.
  ncclComm_t take_pending() {
    const ncclComm_t comm = load_comm(pending_comm);
    std::atomic_ref<ncclComm_t>(pending_comm).store(nullptr, std::memory_order_release);
    return comm;
  }

  // The two point-to-point lanes: splits of the collective lane with the same ranks in the same
  // order (colour 0, key = rank).
  void open_p2p_lanes(std::string_view what) {
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
        return fmt::format("{}: {}: the {} NCCL communicator was not ready within {:g} s", what,
                           who, lane->role, timeout_s);
      });
    }
  }

  CudaBackend& backend;
  const int gpu;
  const double timeout_s;
  const std::string name;
  const int rank;
  const int size;
  const std::vector<int> world_ranks;
  std::string describe;
  std::string who;  // "world rank 3 (nccl 'x': rank 1 of 2 (world ranks 1, 3) on cuda:1)"

  Lane collectives{"collective"};
  Lane up{"lower-to-higher-rank message"};
  Lane down{"higher-to-lower-rank message"};
  // Where ncclCommSplit puts this state's new communicator: an NCCL thread writes it when the
  // split is done; aborted as an orphan if the state dies before adopting it.
  ncclComm_t pending_comm = nullptr;
  // Where ncclCommInitRankConfig puts the collective communicator (set by the call itself; an
  // NCCL thread may store the same value again). Read once, never aborted through.
  ncclComm_t init_handle = nullptr;
  bool constructed = false;  // a clean teardown may use ncclCommDestroy
  std::string broken;        // the first failure; set: the lanes are aborted
};

namespace {

// A caller's buffer as NCCL sees it: the buffer itself when it is device memory, else a
// page-locked block of `window` bytes that each piece is copied into (load) and out of (store).
class Staging {
 public:
  Staging(State& state, const void* user, size_t window, std::string_view what,
          std::string_view role)
      : state_(state), user_(static_cast<std::byte*>(const_cast<void*>(user))) {
    if (user == nullptr)
      throw UsageError(fmt::format("{}: {}: the {} buffer is null", what, state.describe, role));
    if (classify(user, state.gpu, what, role, state.who) == Memory::device) return;
    std::lock_guard lock(nccl_mutex());
    block_ = pinned_pool().acquire(state.gpu, window, fmt::format("{}: {}", what, state.who));
  }
  // Every failure after the NCCL call aborted the lanes, so the block is free again either way.
  ~Staging() {
    if (block_.host == nullptr) return;
    std::lock_guard lock(nccl_mutex());
    pinned_pool().release(state_.gpu, block_);
  }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  bool device() const { return block_.host == nullptr; }
  // NCCL's address of the caller's bytes [offset, offset + n), copied in when staged.
  void* load(size_t offset, size_t n) {
    if (device()) return user_ + offset;
    std::memcpy(block_.host, user_ + offset, n);
    return block_.device;
  }
  // NCCL's address for results that store() puts at the caller's offset.
  void* place(size_t offset) {
    return device() ? static_cast<void*>(user_ + offset) : block_.device;
  }
  void store(size_t offset, size_t n) {
    if (!device()) std::memcpy(user_ + offset, block_.host, n);
  }

 private:
  State& state_;
  std::byte* user_;
  Pinned block_;
};

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

void check_count(int64_t n, std::string_view what, const State& s, std::string_view unit) {
  if (n < 0) throw UsageError(fmt::format("{}: {}: {} {} is negative", what, s.describe, n, unit));
}

}  // namespace
}  // namespace nccl_detail

using nccl_detail::Clock;
using nccl_detail::nccl_mutex;
using nccl_detail::nonblocking_config;
using nccl_detail::SendOp;
using nccl_detail::Staging;
using nccl_detail::State;

// ---- construction
// ----------------------------------------------------------------------------------

NcclCommunicator::NcclCommunicator(const unsigned char* id, int nranks, int rank,
                                   CudaBackend& backend, double timeout_s, std::string name,
                                   std::vector<int> world_ranks) {
  if (id == nullptr)
    throw UsageError(fmt::format("NCCL communicator '{}': the unique id is null", name));
  if (nranks < 1 || rank < 0 || rank >= nranks)
    throw UsageError(fmt::format("NCCL communicator '{}': rank {} of {} is not a rank of a group",
                                 name, rank, nranks));
  if (world_ranks.size() != static_cast<size_t>(nranks))
    throw UsageError(fmt::format("NCCL communicator '{}': {} world ranks given for {} ranks", name,
                                 world_ranks.size(), nranks));
  if (!(timeout_s > 0))
    throw UsageError(
        fmt::format("NCCL communicator '{}': timeout {} s must be > 0", name, timeout_s));

  auto state = std::make_shared<State>(backend, timeout_s, std::move(name), rank, nranks,
                                       std::move(world_ranks));
  State& s = *state;
  DeviceGuard guard(s.gpu);
  const std::string what = fmt::format("creating NCCL communicator '{}'", s.name);
  ncclUniqueId unique{};
  static_assert(sizeof(unique) == NCCL_UNIQUE_ID_BYTES);
  std::memcpy(&unique, id, sizeof(unique));
  {
    std::lock_guard lock(nccl_mutex());
    ncclConfig_t config = nonblocking_config();
    const ncclResult_t r = ncclCommInitRankConfig(&s.init_handle, nranks, unique, rank, &config);
    s.collectives.comm = nccl_detail::load_comm(s.init_handle);
    if (r != ncclSuccess && r != ncclInProgress)
      s.fail_nccl(r, s.collectives.comm, "ncclCommInitRankConfig", what);
    if (s.collectives.comm == nullptr)
      s.fail(fmt::format("{}: {}: ncclCommInitRankConfig returned no communicator", what, s.who),
             false);
  }
  s.finish_lane(s.collectives, what, [&] {
    std::vector<int> others;
    for (int r = 0; r < s.size; ++r)
      if (r != s.rank) others.push_back(s.world_ranks[static_cast<size_t>(r)]);
    return fmt::format(
        "NCCL communicator '{}' on cuda:{}: world rank {} (rank {} of {}) timed out after {:g} s "
        "waiting for the other ranks to join (world ranks {}): at least one of them did not create "
        "its "
        "communicator with the same id",
        s.name, s.gpu, s.world_ranks[static_cast<size_t>(s.rank)], s.rank, s.size, s.timeout_s,
        format_ranks(others));
  });
  s.open_p2p_lanes(what);
  s.constructed = true;
  state_ = std::move(state);
}

NcclCommunicator::NcclCommunicator(std::shared_ptr<State> state) : state_(std::move(state)) {}

NcclCommunicator::~NcclCommunicator() = default;

// ---- queries
// -----------------------------------------------------------------------------------------

int NcclCommunicator::rank() const { return state_->rank; }
int NcclCommunicator::size() const { return state_->size; }
int NcclCommunicator::world_rank(int r) const {
  state_->check_rank(r, "world_rank", "rank");
  return state_->world_ranks[static_cast<size_t>(r)];
}
std::string NcclCommunicator::describe() const { return state_->describe; }
double NcclCommunicator::timeout_s() const { return state_->timeout_s; }
int NcclCommunicator::max_tag() const { return INT_MAX; }

// ---- collectives
// -----------------------------------------------------------------------------------
//
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

// ---- point to point
// ------------------------------------------------------------------------------

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

// ---- groups
// --------------------------------------------------------------------------------------

std::unique_ptr<Communicator> NcclCommunicator::split(int colour, int key, std::string name) {
  State& s = *state_;
  const std::string what = fmt::format("split '{}'", name);
  DeviceGuard guard(s.gpu);
  // Everyone's (colour, key, world rank) first, with a deadline: a missing rank shows as a
  // TimeoutError here, and every rank sees a negative colour and throws the same UsageError.
  const int mine[3] = {colour, key, s.world_ranks[static_cast<size_t>(s.rank)]};
  std::vector<int> all(3 * static_cast<size_t>(s.size));
  all_gather(mine, all.data(), sizeof(mine), what);
  const auto entry = [&](int r, int field) {
    return all[3 * static_cast<size_t>(r) + static_cast<size_t>(field)];
  };
  std::vector<int> negative;
  for (int r = 0; r < s.size; ++r) {
    if (entry(r, 2) != s.world_ranks[static_cast<size_t>(r)])
      throw std::logic_error(
          fmt::format("{}: {}: rank {} says it is world rank {}, this rank has it as world rank {}",
                      what, s.describe, r, entry(r, 2), s.world_ranks[static_cast<size_t>(r)]));
    if (entry(r, 0) < 0) negative.push_back(entry(r, 2));
  }
  if (!negative.empty())
    throw UsageError(
        fmt::format("{}: {}: world rank(s) {} passed a negative colour; colours are >= 0", what,
                    s.describe, format_ranks(negative)));
  // The new group: ranks of my colour ordered by key, ties by rank (as MPI_Comm_split).
  std::vector<int> members;
  for (int r = 0; r < s.size; ++r)
    if (entry(r, 0) == colour) members.push_back(r);
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return entry(a, 1) < entry(b, 1); });
  const int new_rank =
      static_cast<int>(std::find(members.begin(), members.end(), s.rank) - members.begin());
  std::vector<int> new_world;
  for (int r : members) new_world.push_back(s.world_ranks[static_cast<size_t>(r)]);

  auto child = std::make_shared<State>(s.backend, s.timeout_s, std::move(name), new_rank,
                                       static_cast<int>(members.size()), std::move(new_world));
  // NCCL gets the position computed above as its key: its order is then ours, ties included.
  ncclConfig_t config = nonblocking_config();
  s.run(
      s.collectives, false, "ncclCommSplit", what,
      [&](ncclComm_t comm, cudaStream_t) {
        return ncclCommSplit(comm, colour, new_rank, &child->pending_comm, &config);
      },
      [&] { return s.others(); });
  {
    std::lock_guard lock(nccl_mutex());
    child->collectives.comm = child->take_pending();
    if (child->collectives.comm == nullptr)
      child->fail(
          fmt::format("{}: {}: ncclCommSplit finished without a communicator", what, child->who),
          false);
  }
  child->finish_lane(child->collectives, what, [&] {
    return fmt::format("{}: {}: the new NCCL communicator was not ready within {:g} s", what,
                       child->who, s.timeout_s);
  });
  child->open_p2p_lanes(what);
  child->constructed = true;
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(child)));
}

}  // namespace pt::cuda
