#include <algorithm>

#include "schedule/generator_args.h"
#include "schedule/generators.h"

namespace pt::sched {

// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", section 2.1, figure 3 top). The
// backward splits into I (gradient w.r.t. the stage's input: the only part the previous stage
// waits for) and W (gradient w.r.t. the weights: nobody waits for it). Device d runs
//   warm-up:   min(D - d - 1, M) forwards, as 1F1B,
//   steady:    F, I, and a W only once D micro-batches are in flight (F done, W not),
//   cool-down: I then one deferred W, until the I's run out; then the remaining W's.
// Every device thus holds at most min(D, M) micro-batches, the peak of 1F1B (its device 0); the
// later devices, which in 1F1B idle at the end, defer their W's (device d defers d of them) into
// that tail. With F = I = W and M >= D the bubble falls from 1F1B's (D - 1)(F + I + W) per device
// to (D - 1)(F + I - W): step time 3M + D - 1 instead of 3(M + D - 1). The timeline for D = 3,
// M = 4 with F = I = W = 1 (render_timeline of simulate(zb_h1(3, 4))):
//
//   t         0    1    2    3    4    5    6    7    8    9    10   11   12   13
//   device 0  0F0  0F1  0F2  .    .    0I0  0W0  0F3  0I1  0W1  0I2  0W2  0I3  0W3
//   device 1  .    1F0  1F1  .    1I0  1F2  1I1  1W0  1F3  1I2  1W1  1I3  1W2  1W3
//   device 2  .    .    2F0  2I0  2F1  2I1  2F2  2I2  2W0  2F3  2I3  2W1  2W2  2W3
//
// The W's of each stage run in ascending micro-batch order (the rule in generators.h).
Schedule zb_h1(int D, int M) {
  detail::require_shape("zb-h1", D, M);
  Schedule s = empty_schedule(D, D, M);
  for (int d = 0; d < D; ++d) {
    auto& list = s.actions[static_cast<size_t>(d)];
    const int warmup = std::min(D - d - 1, M);
    int f = 0, i = 0, w = 0;
    for (; f < warmup; ++f) list.push_back({d, ActionType::F, f});
    while (i < M) {
      if (f < M) {
        list.push_back({d, ActionType::F, f++});
        list.push_back({d, ActionType::I, i++});
        if (f - w >= D) list.push_back({d, ActionType::W, w++});  // keep <= D in flight
      } else {
        list.push_back({d, ActionType::I, i++});
        list.push_back({d, ActionType::W, w++});  // fill the wait for the next I
      }
    }
    while (w < M) list.push_back({d, ActionType::W, w++});
  }
  return s;
}

}  // namespace pt::sched
