// NCCL communicators (see nccl_communicator.h; nccl_internal.h draws the design): construction
// from a unique id and by split, the queries, and the teardown of a state's lanes. The operations
// are in nccl_collectives.cpp and nccl_point_to_point.cpp.
#include "engine/cuda/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/cuda/nccl_internal.h"

namespace pt::cuda {
namespace nccl_detail {

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // calls return ncclInProgress instead of waiting: every wait has a deadline
  config.splitShare = 0;  // a lane shares nothing with its parent, kernel ordering included
  return config;
}

// ---- a state's lifetime (NcclCommunicator below creates its lanes) ------------------------------

State::State(CudaBackend& backend_, double timeout, std::string name_, int rank_, int size_,
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

State::~State() {
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

void State::close(Lane& lane) {
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

}  // namespace nccl_detail

using nccl_detail::nccl_mutex;
using nccl_detail::nonblocking_config;
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
