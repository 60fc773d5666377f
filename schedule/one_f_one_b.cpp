#include <algorithm>

#include "schedule/generator_args.h"
#include "schedule/generators.h"

namespace pt::sched {

// 1F1B with flush (PipeDream-flush; Narayanan et al. 2021, Megatron's default). Device d runs
//   warm-up:   min(D - d - 1, M) forwards,
//   steady:    one forward, one backward, until the forwards run out,
//   cool-down: the remaining backwards.
// So at most min(D - d, M) micro-batches are in flight on device d (GPipe: M). The timeline for
// D = 3, M = 4 with F = B = 1 time unit (render_timeline of simulate(one_f_one_b(3, 4))):
//
//   t         0    1    2    3    4    5    6    7    8    9    10   11
//   device 0  0F0  0F1  0F2  .    .    0B0  0F3  0B1  .    0B2  .    0B3
//   device 1  .    1F0  1F1  .    1B0  1F2  1B1  1F3  1B2  .    1B3  .
//   device 2  .    .    2F0  2B0  2F1  2B1  2F2  2B2  2F3  2B3  .    .
//
// Step time (M + D - 1)(F + B), the same as GPipe; only the memory differs.
Schedule one_f_one_b(int D, int M) {
  detail::require_shape("1f1b", D, M);
  Schedule s = empty_schedule(D, D, M);
  for (int d = 0; d < D; ++d) {
    auto& list = s.actions[static_cast<size_t>(d)];
    const int warmup = std::min(D - d - 1, M);
    int f = 0;
    for (; f < warmup; ++f) list.push_back({d, ActionType::F, f});
    for (int b = 0; b < M; ++b) {
      if (f < M) list.push_back({d, ActionType::F, f++});  // steady: 1F then 1B
      list.push_back({d, ActionType::B, b});               // cool-down: B only
    }
  }
  return s;
}

}  // namespace pt::sched
