#include "engine/train/training_engine.h"

#include <cmath>

namespace pt {

double global_grad_norm(const std::vector<const StageParameters*>& stages) {
  double sum = 0;
  for (const StageParameters* s : stages)
    for (size_t i = 0; i < s->entries().size(); ++i) {
      const Tensor g = s->grad(i);
      if (g.numel() && !s->entries()[i].tied_copy)
        sum += s->backend().sum_squares(g.f32(), g.numel());
    }
  return std::sqrt(sum);
}

double global_grad_norm(const std::vector<const StageParameters*>& stages, const Model& model,
                        Communicator* group) {
  if (!group) return global_grad_norm(stages);
  // Index of each layer's first parameter tensor in the model's global order.
  std::vector<size_t> first_tensor(static_cast<size_t>(model.num_layers()) + 1, 0);
  for (int l = 0; l < model.num_layers(); ++l)
    first_tensor[static_cast<size_t>(l) + 1] =
        first_tensor[static_cast<size_t>(l)] + model.layer(l).param_specs().size();
  std::vector<double> squares(first_tensor.back(), 0.0);  // zeros for tensors held elsewhere
  for (const StageParameters* s : stages) {
    size_t slot = first_tensor[static_cast<size_t>(s->first_layer())];
    for (size_t i = 0; i < s->entries().size(); ++i, ++slot) {
      const Tensor g = s->grad(i);
      if (g.numel() && !s->entries()[i].tied_copy)
        squares[slot] = s->backend().sum_squares(g.f32(), g.numel());
    }
  }
  // Each slot is non-zero on one process only, so the sum is exact whatever MPI's order.
  group->all_reduce(squares.data(), static_cast<int64_t>(squares.size()), ElemType::f64,
                    ReduceOp::sum, "the gradient-norm exchange between pipeline stages");
  double sum = 0;
  for (double v : squares) sum += v;
  return std::sqrt(sum);
}

}  // namespace pt
