#pragma once
// The tensor-parallel group layers call (layers/tensor_parallel/group.h), over our communicators:
// in-process threads, MPI processes, or NCCL. One pipeline copy (replica r, tensor rank t) runs
// its stages on several devices, and the T ranks of each stage form their own communicator
// (the same device of the T copies); a layer's call goes to the communicator of the device it
// runs on, which it names by the backend it passes. Tensors a communicator cannot read (a GPU's,
// with MPI or in-process) go through host buffers, as the gradient all-reduce does
// (all_reduce_gradients.h).
//
// With overlap on (--tp-overlap, the default), a collective a layer starts runs on a thread of
// its device's route (engine/comm/collective_thread.h) while the layer computes; blocking calls
// queue behind what was started. That needs memory both the communicator and the host thread
// can read without the device's stream: the CPU backend's, with the in-process or MPI
// communicators. Where two micro-batches' forwards take turns (engine/comm/take_turns.h), a
// blocking call is started the same way and waited for after the other micro-batch's turn.
// Elsewhere (a GPU through host buffers, NCCL) a started collective runs where it
// is started, as a blocking one.
#include <functional>
#include <memory>
#include <vector>

#include "engine/comm/collective_thread.h"
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

  // Whether started collectives run beside the caller's compute (on by default).
  void set_overlap(bool overlap) { overlap_ = overlap; }

  int rank() const override;
  int size() const override;
  void all_reduce_sum(Backend& backend, float* data, int64_t n, std::string_view what) override;
  void all_gather(Backend& backend, const float* in, float* out, int64_t n,
                  std::string_view what) override;
  void reduce_scatter_sum(Backend& backend, const float* in, float* out, int64_t n,
                          std::string_view what) override;
  std::unique_ptr<PendingCollective> start_all_reduce_sum(Backend& backend, float* data, int64_t n,
                                                          std::string_view what) override;
  std::unique_ptr<PendingCollective> start_all_gather(Backend& backend, const float* in, float* out,
                                                      int64_t n, std::string_view what) override;
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(Backend& backend, const float* in,
                                                              float* out, int64_t n,
                                                              std::string_view what) override;

 private:
  struct Route {
    const Backend* device = nullptr;  // nullptr: every device
    Communicator* comm = nullptr;
    std::vector<float> staging_in, staging_out;  // host copies (one device's thread uses them)
    std::unique_ptr<CollectiveThread> thread;    // started collectives; created on first use
  };
  Route& route(const Backend& backend);
  // The collective `call` of route r: started on the route's thread where it can overlap, else
  // run here. blocking(): run here, after what the route started.
  bool can_overlap(const Route& r, const Backend& backend) const;
  std::unique_ptr<PendingCollective> start(Route& r, const Backend& backend,
                                           std::function<void()> call);
  // A blocking call: run here, or, while the device's forwards take turns
  // (engine/comm/take_turns.h), started, the turn passed to the other micro-batch, then waited.
  void in_turn(Route& r, const Backend& backend, std::function<void()> call);
  void blocking(Route& r, const std::function<void()>& call);
  void all_reduce_on(Route& r, Backend& backend, float* data, int64_t n, const std::string& what);
  void all_gather_on(Route& r, Backend& backend, const float* in, float* out, int64_t n,
                     const std::string& what);
  void reduce_scatter_on(Route& r, Backend& backend, const float* in, float* out, int64_t n,
                         const std::string& what);

  bool overlap_ = true;

  std::vector<std::unique_ptr<Route>> routes_;
};

// One group per communicator, in the same order (tests and one-device runs).
std::vector<std::unique_ptr<TensorParallelGroup>> tensor_parallel_groups(
    const std::vector<std::unique_ptr<Communicator>>& comms);

}  // namespace pt
