#pragma once
// pt::Communicator over NCCL: one process (or thread) per GPU, buffers in that GPU's memory.
//
// Buffers: device memory of the backend's GPU (device_memory() is true, so the engine hands GPU
// tensors over directly). Host memory is accepted as well and staged through page-locked memory
// (the pipeline's tensor headers and the engine's small host-side reductions travel that way);
// memory of another GPU is a UsageError.
//
// Ordering with the GPU's work: an operation on device memory first waits (on the GPU) for the
// work queued so far on the backend's compute stream, so the buffer's producer has finished; a
// blocking call returns only after the host saw the operation complete, so the caller's later
// work sees the result. isend() does not wait for the receiver (at most ~2 ms for NCCL to take
// the send); its request completes once the receiver has the data.
//
// Point to point, where NCCL differs from MPI:
// - NCCL has no tags. Tags are checked against [0, max_tag()] and otherwise ignored: the k-th
//   message from rank a to rank b is the one b's k-th receive from a gets. Both sides must issue
//   the messages of each direction in the same order (a pipeline schedule does).
// - NCCL cannot tell a receive that the message has another size: a size mismatch is not
//   reported as UsageError but ends, at best, in a TimeoutError (or wrong data). Send and
//   receive the same byte counts.
// - A send does not complete before its receive is posted. Messages to higher ranks and to lower
//   ranks travel on two NCCL communicators of their own, so a rank's send in one direction never
//   delays its receives from the other (the pipeline's activations and gradients); but a blocked
//   send does delay this rank's later receives in the same direction (from lower ranks, for a
//   send to a higher rank). A schedule that relies on a receive overtaking an earlier send in the
//   same direction stalls and ends in a TimeoutError.
// - Sends to oneself are not supported (NCCL would deadlock): UsageError.
//
// Failures: a timeout or an NCCL error aborts the NCCL communicators (ncclCommAbort ends their
// kernels) and leaves this communicator unusable; later calls throw UsageError naming the first
// failure, as the MPI communicator does after a collective timed out. End the job then.
//
// Threads: calls may come from several threads (a process-wide lock serialises every NCCL call,
// as NCCL requires), but NCCL matches operations by issue order, so two threads must not drive
// the same communicator's collectives, or the same direction of its messages, at once.
//
// Costs: a group of more than one rank holds three NCCL communicators (collectives, and one per
// message direction), each with a stream. Their kernels must be able to run side by side: do not
// set CUDA_DEVICE_MAX_CONNECTIONS=1. NCCL allows one rank per GPU in a communicator.
//
// The backend must outlive the communicator. A send request keeps the communicator's NCCL state
// alive until the request is destroyed.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/comm/communicator.h"

namespace pt::cuda {

class CudaBackend;

namespace nccl_detail {
struct State;  // the NCCL communicators, streams and queues (nccl_internal.h)
}

class NcclCommunicator final : public pt::Communicator {
 public:
  // Joins the NCCL clique `id` (the 128 bytes of an ncclUniqueId, the same on every rank) as
  // `rank` of `nranks` on backend.gpu(). `world_ranks[r]` is the world rank of group rank r (for
  // the first communicator 0..nranks-1); they appear in messages. Waits up to timeout_s for the
  // other ranks and throws TimeoutError when they do not join.
  NcclCommunicator(const unsigned char* id, int nranks, int rank, CudaBackend& backend,
                   double timeout_s, std::string name, std::vector<int> world_ranks);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  int world_rank(int r) const override;
  // "nccl 'pipeline of replica 0': rank 1 of 4 (world ranks 0, 1, 2, 3) on cuda:1"
  std::string describe() const override;
  double timeout_s() const override;
  bool device_memory() const override { return true; }

  // ---- collectives ----------------------------------------------------------------------------
  // ReduceOp::mean is NCCL's average (ncclAvg): for f32/f64 each contribution is multiplied by
  // 1/size() before the sum, for i64 the sum is divided by size() (truncating toward zero). The
  // result is the same bits on every rank; for floats it can differ in the last bit from the
  // MPI and in-process communicators' sum-then-divide.
  void all_reduce(void* data, int64_t n, ElemType type, ReduceOp op,
                  std::string_view what) override;
  void reduce_scatter(const float* in, float* out, int64_t count, ReduceOp op,
                      std::string_view what) override;
  void all_gather(const void* in, void* out, size_t bytes, std::string_view what) override;
  void broadcast(void* data, size_t bytes, int root, std::string_view what) override;
  void barrier(std::string_view what) override;

  // ---- point to point (see above: tags are ignored) ---------------------------------------------
  std::unique_ptr<CommRequest> isend(const void* data, size_t bytes, int dst, int tag) override;
  void recv(void* data, size_t bytes, int src, int tag, std::string_view what) override;
  int max_tag() const override;

  // ---- groups ----------------------------------------------------------------------------------
  // ncclCommSplit after an all-gather of (colour, key, world rank) with a deadline. A negative
  // colour on any rank is a UsageError on every rank (each learns it from the all-gather).
  std::unique_ptr<Communicator> split(int colour, int key, std::string name) override;

 private:
  explicit NcclCommunicator(std::shared_ptr<nccl_detail::State> state);

  std::shared_ptr<nccl_detail::State> state_;
};

}  // namespace pt::cuda
