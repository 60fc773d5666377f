#pragma once
// The Communicator interface: a group of ranks that exchange host buffers. The pipeline's
// transfers between processes and the data-parallel gradient reduction are written against it;
// implementations are in-process (threads of one process, engine/comm/in_process.h) and MPI
// (one process per device, engine/comm/mpi.h). NCCL (GPU buffers) comes with the CUDA plugin.
//
// Rules every implementation keeps:
// - Collectives are called by every rank of the group in the same order with the same sizes.
// - Results of a collective are the same bits on every rank (a sum is computed once, in one
//   order, and handed to all), so replicas stay bit-identical.
// - Nothing waits forever: every blocking call gives up after timeout_s() and throws
//   TimeoutError naming the operation (`what`), this rank, and the rank(s) it waited for
//   (as world ranks, so the message points at a process the user can find). MPI collectives
//   wait up to min(2 s, timeout_s() / 2) longer, so that a rank which waits for a dead peer
//   directly reports before the ranks that wait for it (engine/comm/mpi.cpp).
// - Buffers are host memory (the CPU backend's device memory is host memory), except for a
//   communicator whose device_memory() is true (NCCL: memory of its GPU).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace pt {

enum class ReduceOp : uint8_t { sum, mean };
// Element types of reductions (mean of i64 truncates toward zero).
enum class ElemType : uint8_t { f32, f64, i64 };
size_t elem_size(ElemType t);

// A pending point-to-point send.
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  // True once the send completed (its buffer may be reused).
  virtual bool test() = 0;
  // Blocks until completion; throws TimeoutError after the communicator's timeout.
  virtual void wait(std::string_view what) = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The world rank (MPI_COMM_WORLD / the in-process world) of group rank r.
  virtual int world_rank(int r) const = 0;
  // One line: "mpi 'data-parallel stage 1': rank 0 of 2 (world ranks 1, 3)".
  virtual std::string describe() const = 0;
  virtual double timeout_s() const = 0;
  // True when buffers are device memory of one GPU (NCCL); false for host memory (the default:
  // in-process and MPI). Callers holding tensors of a GPU stage them through the host otherwise.
  virtual bool device_memory() const { return false; }

  // ---- collectives ----------------------------------------------------------------------------
  // data (n elements) is replaced by the element-wise reduction over all ranks.
  virtual void all_reduce(void* data, int64_t n, ElemType type, ReduceOp op,
                          std::string_view what) = 0;
  // in: size() * count f32 values; out: count values = the reduction of block rank() of every rank.
  virtual void reduce_scatter(const float* in, float* out, int64_t count, ReduceOp op,
                              std::string_view what) = 0;
  // in: bytes from every rank; out: size() * bytes, rank r's bytes at offset r * bytes.
  virtual void all_gather(const void* in, void* out, size_t bytes, std::string_view what) = 0;
  // data (bytes) on `root` is copied to every rank.
  virtual void broadcast(void* data, size_t bytes, int root, std::string_view what) = 0;
  virtual void barrier(std::string_view what) = 0;

  // ---- point to point (ranks of this group; tag in [0, max_tag()]) -----------------------------
  // Starts a send and returns at once; `data` must stay valid and unchanged until the request
  // completed. Sends never wait for the matching receive to be posted (a pipeline schedule's
  // deadlock check relies on that).
  virtual std::unique_ptr<CommRequest> isend(const void* data, size_t bytes, int dst, int tag) = 0;
  // Receives exactly `bytes` from `src` with `tag`; throws TimeoutError naming `what` and `src`,
  // or UsageError when the message has another size.
  virtual void recv(void* data, size_t bytes, int src, int tag, std::string_view what) = 0;
  virtual int max_tag() const = 0;

  // ---- groups ----------------------------------------------------------------------------------
  // Collective over this group: ranks passing the same colour form a new group, ordered by key
  // (ties by rank), as MPI_Comm_split. `name` appears in describe() and in error messages.
  virtual std::unique_ptr<Communicator> split(int colour, int key, std::string name) = 0;
};

// ---- helpers shared by the implementations (engine/comm/communicator.cpp) ----------------------
// acc[i] += in[i] for i in [0, n): one step of a reduction. Callers apply it rank after rank, so
// every element is ((x0 + x1) + x2) + ... and the bits do not depend on who computes it.
void accumulate(void* acc, const void* in, int64_t n, ElemType type);
// data[i] /= ranks, once, after the sum: how ReduceOp::mean is computed everywhere.
void divide_by_ranks(void* data, int64_t n, ElemType type, int ranks);
// "1, 3, 5" for messages; long lists are cut after 16 entries ("..., (40 ranks)").
std::string format_ranks(std::span<const int> ranks);
// The time a blocking call that starts now gives up.
std::chrono::steady_clock::time_point deadline_after(double timeout_s);

}  // namespace pt
