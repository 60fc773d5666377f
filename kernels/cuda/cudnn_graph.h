#pragma once
// A small builder over cuDNN's backend graph API (cudnn_graph.h, part of every cuDNN 9): tensors,
// pointwise / matmul / reduction / reshape operations, the operation graph, and an execution plan
// chosen by cuDNN's heuristics. Inside the plugin only. The fused flash-attention engine
// (kernels/cuda/cudnn_attention.cpp) is reached this way: cuDNN recognises the pattern of a
// graph, so a graph is written op by op, as the cuDNN frontend's composite SDPA node writes it.
//
// Every tensor has a unique id (uid); ops name their inputs and outputs by uid. Scalars are
// tensors passed by value: their values are kept here and handed to cuDNN at execution.
#include <cudnn_graph.h>

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace pt::cuda::cudnn_graph {

// cuDNN refused a step (a descriptor, the graph, every engine the heuristics offered): the
// message names the step, the status and cuDNN's own last error text.
class Refused : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws Refused "<what>: <status name> (<code>): <cuDNN's last error>" unless s is success.
void check(cudnnStatus_t s, const std::string& what);

// One backend descriptor, destroyed with its owner.
class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type);
  ~Descriptor();
  Descriptor(Descriptor&& other) noexcept : d_(other.d_) { other.d_ = nullptr; }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  Descriptor& operator=(Descriptor&&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
           const void* values, const char* what);
  void finalize(const char* what);

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

using Uid = int64_t;
using Dims = std::vector<int64_t>;

// A built plan: run it with execute(). Owns its descriptors and the by-value scalars' values.
struct Plan {
  std::shared_ptr<Descriptor> plan;
  int64_t workspace_bytes = 0;
  std::map<Uid, float> scalars;  // by-value tensors: uid -> value
  std::string engine;            // which engine config was taken, for messages
  // The graph's descriptors and the chosen engine config, alive as long as the plan.
  std::vector<std::shared_ptr<Descriptor>> keep_alive;
};

class Graph {
 public:
  // A tensor of `type` (CUDNN_DATA_FLOAT, _BFLOAT16, _INT32, _BOOLEAN); a virtual one lives
  // only inside the fused kernel. Returns its uid.
  Uid tensor(const Dims& dims, const Dims& strides, cudnnDataType_t type, bool is_virtual);
  // A fp32 scalar passed by value (dims and strides all 1).
  Uid scalar(float value);

  // y = mode(x[, b[, t]]): t is the condition of BINARY_SELECT (y = t ? x : b). `axis` is for
  // GEN_INDEX. Math in `compute` (fp32 unless told).
  void pointwise(cudnnPointwiseMode_t mode, Uid x, Uid y,
                 cudnnDataType_t compute = CUDNN_DATA_FLOAT, int64_t axis = -1);
  void pointwise(cudnnPointwiseMode_t mode, Uid x, Uid b, Uid y,
                 cudnnDataType_t compute = CUDNN_DATA_FLOAT);
  void pointwise(cudnnPointwiseMode_t mode, Uid x, Uid b, Uid t, Uid y);
  void matmul(Uid a, Uid b, Uid c);                        // batched over the leading dims
  void reduction(cudnnReduceTensorOp_t op, Uid x, Uid y);  // over the dims where y is 1
  void reshape(Uid x, Uid y);                              // same elements, y's strides

  // The operation graph, finalized: on `handle`, or with none (nullptr) to check the graph on a
  // machine without a GPU (cuDNN validates the ops and their connections; it needs the handle,
  // or the device's properties, only to choose engines). Throws Refused.
  std::shared_ptr<Descriptor> operation_graph(cudnnHandle_t handle) const;
  size_t op_count() const { return ops_.size(); }

  // The operation graph on `handle`, the heuristics' engine configs (mode A) in order, and the
  // first that finalizes into a plan; with `deterministic`, configs that cuDNN marks
  // non-deterministic are skipped. Throws Refused naming the last reason when none works.
  Plan build(cudnnHandle_t handle, bool deterministic) const;

  // Runs `plan` on the handle's stream. `pointers` maps every non-virtual, non-scalar uid to
  // its device memory; workspace holds plan.workspace_bytes.
  static void execute(cudnnHandle_t handle, const Plan& plan, const std::map<Uid, void*>& pointers,
                      void* workspace);

 private:
  Descriptor& tensor_descriptor(Uid uid) const;
  void pointwise_op(cudnnPointwiseMode_t mode, cudnnDataType_t compute, int64_t axis, Uid x, Uid b,
                    Uid t, Uid y);
  void add(Descriptor op) { ops_.push_back(std::make_shared<Descriptor>(std::move(op))); }

  Uid next_uid_ = 1;
  std::map<Uid, std::shared_ptr<Descriptor>> tensors_;
  std::map<Uid, float> scalars_;
  // Kept alive until the graph is: cuDNN's op descriptors refer to the tensors and to their own
  // pointwise / matmul / reduction descriptors.
  std::vector<std::shared_ptr<Descriptor>> ops_, op_configs_;
};

}  // namespace pt::cuda::cudnn_graph
