#include <algorithm>
#include <stdexcept>
#include <string>

#include "schedule/generator_args.h"
#include "schedule/generators.h"

namespace pt::sched {

// The lists of one_f_one_b(D, K * M) — the steady state runs straight across step boundaries —
// with UPDATE(d, k) after device d's backward of micro-batch k * M + M - 1. At device d the
// forward of micro-batch g runs just before the backward of g - w (w = D - 1 - d warm-up
// forwards), so step k + 2's first forward (g = (k + 2) M) follows the backward of (k + 2) M - w,
// which is in step k + 1 when w <= M: UPDATE(d, k) has run, and the weights it wrote are the ones
// step k + 2 needs. For D = 2, M = 2, K = 2:
//   device 0  0F0 0F1 0B0 0F2 0B1 0UPDATE0 0F3 0B2 0B3 0UPDATE1
//   device 1  1F0 1B0 1F1 1B1 1UPDATE0 1F2 1B2 1F3 1B3 1UPDATE1
Schedule one_f_one_b_async(int D, int M, int K) {
  detail::require_shape("1f1b async", D, M);
  if (K < 1)
    throw std::invalid_argument("1f1b async: the window is " + std::to_string(K) +
                                " steps; it must be >= 1");
  if (M < D - 1)
    throw std::invalid_argument(
        "1f1b async: " + std::to_string(M) + " micro-batches over " + std::to_string(D) +
        " stages; asynchronous updates need M >= " + std::to_string(D - 1) + " (stages - 1)");
  const Schedule flat = one_f_one_b(D, K * M);
  Schedule s = flat;
  s.steps = K;
  for (size_t d = 0; d < flat.actions.size(); ++d) {
    auto& list = s.actions[d];
    list.clear();
    for (const Action& a : flat.actions[d]) {
      list.push_back(a);
      if (a.type == ActionType::B && a.microbatch % M == M - 1)
        list.push_back({a.stage, ActionType::UPDATE, a.microbatch / M});
    }
  }
  return s;
}

}  // namespace pt::sched
