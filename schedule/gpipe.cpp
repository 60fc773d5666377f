#include "schedule/generator_args.h"
#include "schedule/generators.h"

namespace pt::sched {

// GPipe's fill-drain (torchgpipe's clock_cycles): all forwards, then all backwards. The timeline
// for D = 3, M = 4 with F = B = 1 time unit (render_timeline of simulate(gpipe(3, 4))):
//
//   t         0    1    2    3    4    5    6    7    8    9    10   11
//   device 0  0F0  0F1  0F2  0F3  .    .    .    .    0B0  0B1  0B2  0B3
//   device 1  .    1F0  1F1  1F2  1F3  .    .    1B0  1B1  1B2  1B3  .
//   device 2  .    .    2F0  2F1  2F2  2F3  2B0  2B1  2B2  2B3  .    .
//
// Step time (M + D - 1)(F + B); bubble (D - 1) / (M + D - 1); every device holds all M
// micro-batches' activations. GPipe runs the backwards in reverse micro-batch order; we run them
// ascending (the accumulation rule in generators.h), which costs nothing here: B(s, m) waits for
// B(s + 1, m) either way.
Schedule gpipe(int D, int M) {
  detail::require_shape("gpipe", D, M);
  Schedule s = empty_schedule(D, D, M);
  for (int d = 0; d < D; ++d) {
    auto& list = s.actions[static_cast<size_t>(d)];
    for (int m = 0; m < M; ++m) list.push_back({d, ActionType::F, m});
    for (int m = 0; m < M; ++m) list.push_back({d, ActionType::B, m});
  }
  return s;
}

}  // namespace pt::sched
