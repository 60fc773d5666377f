#pragma once
// What the files of the NCCL communicator (nccl_communicator.h) share: the lanes, the state a
// communicator and its send requests hold, the page-locked staging of host buffers. Private to
// engine/cuda/nccl_*.cpp: nccl_communicator.cpp (construction, split, teardown), nccl_lanes.cpp
// (issuing NCCL calls and waiting for them), nccl_failures.cpp (checks, aborts),
// nccl_staging.cpp, nccl_collectives.cpp and nccl_point_to_point.cpp.
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
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/cuda/nccl_communicator.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"

namespace pt::cuda::nccl_detail {

using Clock = std::chrono::steady_clock;
// Between polls of a slow NCCL operation (its kernels progress on their own, unlike MPI).
constexpr std::chrono::microseconds kPollSleep{50};

// One lock for every NCCL call and for the lane state of every communicator of the process.
// Never destroyed: a communicator may be torn down during static destruction.
std::mutex& nccl_mutex();

// NCCL's text for a result, with its last error message (the detail, when there is one).
std::string nccl_error(ncclResult_t result, ncclComm_t comm);

ncclConfig_t nonblocking_config();

// An NCCL communicator handle written by an NCCL thread (the target of a nonblocking init or
// split) is read through this.
inline ncclComm_t load_comm(ncclComm_t& slot) {
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
  Pinned acquire(int gpu, size_t bytes, const std::string& where);
  void release(int gpu, Pinned block);

 private:
  std::map<int, std::vector<Pinned>> free_;
};

PinnedPool& pinned_pool();

// Device memory of this GPU (or managed memory) goes to NCCL as it is; host memory is staged.
enum class Memory { device, host };

Memory classify(const void* p, int gpu, std::string_view what, std::string_view role,
                const std::string& who);

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

// ---- the state shared by a communicator and its send requests -----------------------------------

struct State {
  State(CudaBackend& backend_, double timeout, std::string name_, int rank_, int size_,
        std::vector<int> world);
  // Destroys the lanes: ncclCommDestroy when everything finished, else ncclCommAbort (destroy
  // would wait for kernels that may never end). Never throws.
  ~State();

  State(const State&) = delete;
  State& operator=(const State&) = delete;

  std::array<Lane*, 3> lanes() { return {&collectives, &up, &down}; }
  Lane& lane_to(int peer) { return peer > rank ? up : down; }
  Lane& lane_from(int peer) { return peer < rank ? up : down; }

  // ---- checks (no lock needed: the fields read are immutable; nccl_failures.cpp) ----------------
  void check_rank(int r, std::string_view what, std::string_view role) const;
  void check_peer(int r, std::string_view what, std::string_view role) const;
  void check_tag(int tag, std::string_view what) const;
  // "world rank 3" or "world ranks 1, 3 (at least one of them did not arrive)".
  std::string others() const;

  // ---- everything below runs under nccl_mutex() -------------------------------------------------
  // Failures (nccl_failures.cpp).
  void throw_if_broken(std::string_view what) const;
  // Marks the communicator broken, aborts every lane and throws `message`.
  [[noreturn]] void fail(const std::string& message, bool timeout);
  [[noreturn]] void fail_nccl(ncclResult_t result, ncclComm_t comm, std::string_view call,
                              std::string_view what);
  void cuda_call(cudaError_t e, const char* call, std::string_view what);
  void drop(SendOp& op);
  // ncclCommAbort makes the lanes' kernels exit, so their staging blocks are free again.
  void abort_all();
  // Teardown (nccl_communicator.cpp).
  void close(Lane& lane);

  // Progress of the lanes (nccl_lanes.cpp).
  bool event_done(cudaEvent_t event, std::string_view what);
  // Reads the lane's asynchronous state: throws on an NCCL error; finishes a send whose
  // enqueue NCCL completed in the background.
  void check_async(Lane& lane, std::string_view what);
  // Hands queued sends to NCCL while the lane accepts calls.
  void launch_queued(Lane& lane, std::string_view what);
  // Sends complete in the order of their lane's stream.
  void reap(Lane& lane, std::string_view what);
  void progress(std::string_view what);
  // "; this rank's earlier sends to world ranks 2 on the same NCCL communicator had not completed
  // ..."
  std::string earlier_sends(const Lane& lane) const;

  // ---- the waits (called without the lock; nccl_lanes.cpp) --------------------------------------

  // Issues one NCCL call on `lane`, after the sends queued there before it, and returns once the
  // GPU finished it. `after_compute`: the call touches device memory, so it first waits for the
  // work queued so far on the compute stream; until that work is done the deadline measures this
  // GPU, afterwards the peers. `waited_for` names, for a timeout, whom the call waited for.
  void run(Lane& lane, bool after_compute, std::string_view op, std::string_view what,
           const std::function<ncclResult_t(ncclComm_t, cudaStream_t)>& call,
           const std::function<std::string()>& waited_for);
  // Waits until the communicator of `lane` finished initialising (nonblocking init or split),
  // then checks it and gives the lane its stream.
  void finish_lane(Lane& lane, std::string_view what,
                   const std::function<std::string()>& timeout_message);
  // The communicator a finished split wrote into `pending_comm`.
  ncclComm_t take_pending();
  // The two point-to-point lanes: splits of the collective lane with the same ranks in the same
  // order (colour 0, key = rank).
  void open_p2p_lanes(std::string_view what);

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

// A caller's buffer as NCCL sees it: the buffer itself when it is device memory, else a
// page-locked block of `window` bytes that each piece is copied into (load) and out of (store).
class Staging {
 public:
  Staging(State& state, const void* user, size_t window, std::string_view what,
          std::string_view role);
  // Every failure after the NCCL call aborted the lanes, so the block is free again either way.
  ~Staging();

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

}  // namespace pt::cuda::nccl_detail
