#include "engine/parallel/all_reduce_gradients.h"

namespace pt {

void all_reduce_gradients(Backend& backend, Communicator& group, float* grads, int64_t count,
                          std::vector<float>& staging, const std::string& what) {
  if (count == 0) return;
  if (!needs_host_staging(backend, group)) {
    group.all_reduce(grads, count, ElemType::f32, ReduceOp::sum, what);
    return;
  }
  const size_t bytes = static_cast<size_t>(count) * sizeof(float);
  staging.resize(static_cast<size_t>(count));
  backend.copy_to_host(staging.data(), grads, bytes);
  group.all_reduce(staging.data(), count, ElemType::f32, ReduceOp::sum, what);
  backend.copy_from_host(grads, staging.data(), bytes);
}

}  // namespace pt
