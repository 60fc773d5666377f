#pragma once
// The MPI communicator's class and the helpers its files share: mpi.cpp (MPI's lifetime, the
// world, construction, split, timeouts), mpi_collectives.cpp, mpi_point_to_point.cpp. Private to
// them: it includes <mpi.h>, and the rest of the engine reaches MPI through mpi.h alone.
#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/comm/communicator.h"

namespace pt::mpi_detail {

using Clock = std::chrono::steady_clock;

double collective_grace_s(double timeout_s);
std::string mpi_error_text(int code);
void check(int rc, std::string_view call);
bool mpi_finalized();
bool poll_until(MPI_Request& request, Clock::time_point deadline, MPI_Status* status, int* rc);

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed in the destructor).
  MpiCommunicator(MPI_Comm comm, std::string name, double timeout_s);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int world_rank(int r) const override {
    check_rank(r, "world_rank", "rank");
    return world_ranks_[r];
  }
  std::string describe() const override { return describe_; }
  double timeout_s() const override { return timeout_s_; }
  int max_tag() const override { return max_tag_; }

  // ---- collectives (mpi_collectives.cpp) ----------------------------------------------------
  void all_reduce(void* data, int64_t n, ElemType type, ReduceOp op,
                  std::string_view what) override;
  void reduce_scatter(const float* in, float* out, int64_t count, ReduceOp op,
                      std::string_view what) override;
  void all_gather(const void* in, void* out, size_t bytes, std::string_view what) override;
  void broadcast(void* data, size_t bytes, int root, std::string_view what) override;
  void barrier(std::string_view what) override;

  // ---- point to point (mpi_point_to_point.cpp) ----------------------------------------------
  std::unique_ptr<CommRequest> isend(const void* data, size_t bytes, int dst, int tag) override;
  void recv(void* data, size_t bytes, int src, int tag, std::string_view what) override;

  // ---- groups (mpi.cpp) ---------------------------------------------------------------------
  std::unique_ptr<Communicator> split(int colour, int key, std::string name) override;

 private:
  // ---- the large all-reduce (mpi_collectives.cpp) -------------------------------------------
  void pairwise_all_reduce(std::byte* data, int64_t n, ElemType type, std::string_view what);
  struct PendingMessages;
  void wait_all(PendingMessages& phase, std::string_view what);

  // ---- waits, timeouts and argument checks (mpi.cpp) ----------------------------------------
  void wait_collective(MPI_Request& request, std::string_view op, std::string_view what);
  void abandon(std::span<const MPI_Request> requests, const std::string& why);
  void throw_if_broken(std::string_view what) const;
  void check_rank(int r, std::string_view what, std::string_view role) const;
  void check_tag(int tag, std::string_view what) const;
  int to_int(int64_t n, std::string_view what, std::string_view unit) const;

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

}  // namespace pt::mpi_detail
