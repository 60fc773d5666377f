#include "engine/parallel/tensor_parallel_group.h"

#include <string>

#include <fmt/format.h>

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

void CommunicatorTensorParallelGroup::all_reduce_sum(Backend& backend, float* data, int64_t n,
                                                     std::string_view what) {
  Route& r = route(backend);
  all_reduce_gradients(backend, *r.comm, data, n, r.staging_in, std::string(what));
}

void CommunicatorTensorParallelGroup::all_gather(Backend& backend, const float* in, float* out,
                                                 int64_t n, std::string_view what) {
  Route& r = route(backend);
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

void CommunicatorTensorParallelGroup::reduce_scatter_sum(Backend& backend, const float* in,
                                                         float* out, int64_t n,
                                                         std::string_view what) {
  Route& r = route(backend);
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

std::vector<std::unique_ptr<TensorParallelGroup>> tensor_parallel_groups(
    const std::vector<std::unique_ptr<Communicator>>& comms) {
  std::vector<std::unique_ptr<TensorParallelGroup>> groups;
  for (const auto& c : comms)
    groups.push_back(std::make_unique<CommunicatorTensorParallelGroup>(*c));
  return groups;
}

}  // namespace pt
