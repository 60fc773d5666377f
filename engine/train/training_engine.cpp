#include "engine/train/training_engine.h"

#include <cmath>
#include <vector>

namespace pt {

namespace {
// Sums of squares of stage s's gradient tensors i where counted(i), in entry order, by one
// sum_squares_each call (one wait for the device); the others 0.
template <class Counted>
std::vector<double> gradient_squares(const StageParameters& s, Counted counted) {
  const size_t n = s.entries().size();
  std::vector<const float*> xs;
  std::vector<int64_t> ns;
  std::vector<size_t> which;
  for (size_t i = 0; i < n; ++i) {
    const Tensor g = s.grad(i);
    if (g.numel() && counted(i)) {
      xs.push_back(g.f32());
      ns.push_back(g.numel());
      which.push_back(i);
    }
  }
  std::vector<double> sums(which.size()), out(n, 0.0);
  s.backend().sum_squares_each(xs.data(), ns.data(), xs.size(), sums.data());
  for (size_t k = 0; k < which.size(); ++k) out[which[k]] = sums[k];
  return out;
}
}  // namespace

double global_grad_norm(const std::vector<const StageParameters*>& stages) {
  double sum = 0;
  for (const StageParameters* s : stages) {
    // Tensors not counted are 0 there, and adding +0.0 leaves the sum's bits as they were.
    for (double v : gradient_squares(*s, [&](size_t i) { return !s->entries()[i].tied_copy; }))
      sum += v;
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
    const std::vector<double> mine = gradient_squares(*s, [&](size_t i) {
      const ParameterEntry& e = s->entries()[i];
      const bool split = model.layer(e.layer).param_specs()[e.param_index].shard.split();
      return !e.tied_copy && (split || counts_replicas);
    });
    const size_t first = first_tensor[static_cast<size_t>(s->first_layer())];
    for (size_t i = 0; i < mine.size(); ++i) squares[first + i] = mine[i];
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
