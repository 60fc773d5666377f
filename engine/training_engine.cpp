#include "engine/training_engine.h"

#include <cmath>

namespace pt {

double global_grad_norm(const std::vector<const StageParameters*>& stages) {
  double sum = 0;
  for (const StageParameters* s : stages)
    for (size_t i = 0; i < s->entries().size(); ++i) {
      const Tensor g = s->grad(i);
      if (g.numel()) sum += s->backend().sum_squares(g.f32(), g.numel());
    }
  return std::sqrt(sum);
}

}  // namespace pt
