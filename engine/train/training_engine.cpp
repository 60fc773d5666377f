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
                        Communicator* group, Communicator* tensor_group) {
  if (!group && !tensor_group) return global_grad_norm(stages);
  const bool counts_replicas = !tensor_group || tensor_group->rank() == 0;
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
      const ParameterEntry& e = s->entries()[i];
      const bool split = model.layer(e.layer).param_specs()[e.param_index].shard.split();
      if (g.numel() && !e.tied_copy && (split || counts_replicas))
        squares[slot] = s->backend().sum_squares(g.f32(), g.numel());
    }
  }
  // Each slot is non-zero on one process only, so the sum is exact whatever MPI's order.
  if (group)
    group->all_reduce(squares.data(), static_cast<int64_t>(squares.size()), ElemType::f64,
                      ReduceOp::sum, "the gradient-norm exchange between pipeline stages");
  // A split tensor's slices: one sum per rank, added in rank order (the same bits everywhere).
  if (tensor_group)
    tensor_group->all_reduce(squares.data(), static_cast<int64_t>(squares.size()), ElemType::f64,
                             ReduceOp::sum, "the gradient-norm exchange between tensor ranks");
  double sum = 0;
  for (double v : squares) sum += v;
  return std::sqrt(sum);
}

}  // namespace pt
