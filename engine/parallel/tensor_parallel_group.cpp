#include "engine/parallel/tensor_parallel_group.h"

#include <string>

#include <fmt/format.h>

#include "engine/comm/take_turns.h"
#include "engine/core/error.h"
#include "engine/parallel/all_reduce_gradients.h"

namespace pt {

CommunicatorTensorParallelGroup::CommunicatorTensorParallelGroup(Communicator& comm) {
  routes_.push_back(std::make_unique<Route>());
  routes_.back()->comm = &comm;
}

void CommunicatorTensorParallelGroup::add_device(const Backend& device, Communicator& comm) {
  if (!routes_.empty() && (comm.rank() != rank() || comm.size() != size()))
    throw UsageError(fmt::format("tensor-parallel group: {} is not rank {} of {}", comm.describe(),
                                 rank(), size()));
  routes_.push_back(std::make_unique<Route>());
  routes_.back()->device = &device;
  routes_.back()->comm = &comm;
}

int CommunicatorTensorParallelGroup::rank() const {
  return routes_.empty() ? 0 : routes_[0]->comm->rank();
}

int CommunicatorTensorParallelGroup::size() const {
  return routes_.empty() ? 1 : routes_[0]->comm->size();
}

CommunicatorTensorParallelGroup::Route& CommunicatorTensorParallelGroup::route(
    const Backend& backend) {
  for (auto& r : routes_)
    if (!r->device || r->device == &backend) return *r;
  throw UsageError(fmt::format(
      "tensor-parallel group: a layer ran on {}, which has no tensor-parallel communicator here",
      backend.describe()));
}

namespace {

// A collective running on a route's thread. Dropped without a wait, it still waits: the
// collective must not outlive the buffers it was started with.
class ThreadedCollective final : public PendingCollective {
 public:
  explicit ThreadedCollective(std::shared_ptr<CollectiveThread::Work> work)
      : work_(std::move(work)) {}
  ThreadedCollective(const ThreadedCollective&) = delete;
  ThreadedCollective& operator=(const ThreadedCollective&) = delete;
  ~ThreadedCollective() override {
    try {
      work_->wait();
    } catch (...) {  // reported by wait() to whoever waited, or by a peer
    }
  }
  void wait() override { work_->wait(); }

 private:
  std::shared_ptr<CollectiveThread::Work> work_;
};

}  // namespace

// The route's thread reads and writes the buffers while the caller computes: only memory that is
// the host's, handed to a communicator of host memory (no copy on a device stream).
bool CommunicatorTensorParallelGroup::can_overlap(const Route& r, const Backend& backend) const {
  return overlap_ && backend.host_accessible() && !r.comm->device_memory();
}

std::unique_ptr<PendingCollective> CommunicatorTensorParallelGroup::start(
    Route& r, const Backend& backend, std::function<void()> call) {
  if (!can_overlap(r, backend)) {
    blocking(r, call);
    return std::make_unique<CompletedCollective>();
  }
  if (!r.thread) r.thread = std::make_unique<CollectiveThread>();
  return std::make_unique<ThreadedCollective>(r.thread->start(std::move(call)));
}

void CommunicatorTensorParallelGroup::in_turn(Route& r, const Backend& backend,
                                              std::function<void()> call) {
  if (TakeTurns::partner_running() && can_overlap(r, backend)) {
    const std::unique_ptr<PendingCollective> pending = start(r, backend, std::move(call));
    TakeTurns::pass();  // the other micro-batch computes while this collective runs
    pending->wait();
    return;
  }
  blocking(r, call);
}

void CommunicatorTensorParallelGroup::blocking(Route& r, const std::function<void()>& call) {
  if (r.thread && !r.thread->idle()) {
    r.thread->start(call)->wait();  // behind what was started, in the same order on every rank
    return;
  }
  call();
}

void CommunicatorTensorParallelGroup::all_reduce_on(Route& r, Backend& backend, float* data,
                                                    int64_t n, const std::string& what) {
  all_reduce_gradients(backend, *r.comm, data, n, r.staging_in, what);
}

void CommunicatorTensorParallelGroup::all_gather_on(Route& r, Backend& backend, const float* in,
                                                    float* out, int64_t n,
                                                    const std::string& what) {
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  const auto ranks = static_cast<size_t>(r.comm->size());
  if (!needs_host_staging(backend, *r.comm)) {
    r.comm->all_gather(in, out, bytes, what);
    return;
  }
  r.staging_in.resize(static_cast<size_t>(n));
  r.staging_out.resize(static_cast<size_t>(n) * ranks);
  backend.copy_to_host(r.staging_in.data(), in, bytes);
  r.comm->all_gather(r.staging_in.data(), r.staging_out.data(), bytes, what);
  backend.copy_from_host(out, r.staging_out.data(), bytes * ranks);
}

void CommunicatorTensorParallelGroup::reduce_scatter_on(Route& r, Backend& backend, const float* in,
                                                        float* out, int64_t n,
                                                        const std::string& what) {
  if (!needs_host_staging(backend, *r.comm)) {
    r.comm->reduce_scatter(in, out, n, ReduceOp::sum, what);
    return;
  }
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  const auto ranks = static_cast<size_t>(r.comm->size());
  r.staging_in.resize(static_cast<size_t>(n) * ranks);
  r.staging_out.resize(static_cast<size_t>(n));
  backend.copy_to_host(r.staging_in.data(), in, bytes * ranks);
  r.comm->reduce_scatter(r.staging_in.data(), r.staging_out.data(), n, ReduceOp::sum, what);
  backend.copy_from_host(out, r.staging_out.data(), bytes);
}

void CommunicatorTensorParallelGroup::all_reduce_sum(Backend& backend, float* data, int64_t n,
                                                     std::string_view what) {
  Route& r = route(backend);
  in_turn(r, backend, [&] { all_reduce_on(r, backend, data, n, std::string(what)); });
}

void CommunicatorTensorParallelGroup::all_gather(Backend& backend, const float* in, float* out,
                                                 int64_t n, std::string_view what) {
  Route& r = route(backend);
  in_turn(r, backend, [&] { all_gather_on(r, backend, in, out, n, std::string(what)); });
}

void CommunicatorTensorParallelGroup::reduce_scatter_sum(Backend& backend, const float* in,
                                                         float* out, int64_t n,
                                                         std::string_view what) {
  Route& r = route(backend);
  in_turn(r, backend, [&] { reduce_scatter_on(r, backend, in, out, n, std::string(what)); });
}

std::unique_ptr<PendingCollective> CommunicatorTensorParallelGroup::start_all_reduce_sum(
    Backend& backend, float* data, int64_t n, std::string_view what) {
  Route& r = route(backend);
  return start(r, backend, [this, &r, &backend, data, n, what = std::string(what)] {
    all_reduce_on(r, backend, data, n, what);
  });
}

std::unique_ptr<PendingCollective> CommunicatorTensorParallelGroup::start_all_gather(
    Backend& backend, const float* in, float* out, int64_t n, std::string_view what) {
  Route& r = route(backend);
  return start(r, backend, [this, &r, &backend, in, out, n, what = std::string(what)] {
    all_gather_on(r, backend, in, out, n, what);
  });
}

std::unique_ptr<PendingCollective> CommunicatorTensorParallelGroup::start_reduce_scatter_sum(
    Backend& backend, const float* in, float* out, int64_t n, std::string_view what) {
  Route& r = route(backend);
  return start(r, backend, [this, &r, &backend, in, out, n, what = std::string(what)] {
    reduce_scatter_on(r, backend, in, out, n, what);
  });
}

std::vector<std::unique_ptr<TensorParallelGroup>> tensor_parallel_groups(
    const std::vector<std::unique_ptr<Communicator>>& comms) {
  std::vector<std::unique_ptr<TensorParallelGroup>> groups;
  for (const auto& c : comms)
    groups.push_back(std::make_unique<CommunicatorTensorParallelGroup>(*c));
  return groups;
}

}  // namespace pt
