#pragma once
// The tensor-parallel group layers call (layers/tensor_parallel/group.h), over our communicators:
// in-process threads, MPI processes, or NCCL. One pipeline copy (replica r, tensor rank t) runs
// its stages on several devices, and the T ranks of each stage form their own communicator
// (the same device of the T copies); a layer's call goes to the communicator of the device it
// runs on, which it names by the backend it passes. Tensors a communicator cannot read (a GPU's,
// with MPI or in-process) go through host buffers, as the gradient all-reduce does
// (all_reduce_gradients.h).
#include <memory>
#include <vector>

#include "engine/comm/communicator.h"
#include "layers/tensor_parallel/group.h"

namespace pt {

class CommunicatorTensorParallelGroup final : public TensorParallelGroup {
 public:
  // Every device's calls go to `comm` (one device, or a test); it outlives this group.
  explicit CommunicatorTensorParallelGroup(Communicator& comm);
  // Calls with `device` go to `comm`. Every communicator added has the same rank and size.
  CommunicatorTensorParallelGroup() = default;
  void add_device(const Backend& device, Communicator& comm);

  int rank() const override;
  int size() const override;
  void all_reduce_sum(Backend& backend, float* data, int64_t n, std::string_view what) override;
  void all_gather(Backend& backend, const float* in, float* out, int64_t n,
                  std::string_view what) override;
  void reduce_scatter_sum(Backend& backend, const float* in, float* out, int64_t n,
                          std::string_view what) override;

 private:
  struct Route {
    const Backend* device = nullptr;  // nullptr: every device
    Communicator* comm = nullptr;
    std::vector<float> staging_in, staging_out;  // host copies (one device's thread uses them)
  };
  Route& route(const Backend& backend);

  std::vector<std::unique_ptr<Route>> routes_;
};

// One group per communicator, in the same order (tests and one-device runs).
std::vector<std::unique_ptr<TensorParallelGroup>> tensor_parallel_groups(
    const std::vector<std::unique_ptr<Communicator>>& comms);

}  // namespace pt
