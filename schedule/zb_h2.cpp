#include <algorithm>
#include <stdexcept>
#include <vector>

#include "schedule/generator_args.h"
#include "schedule/generators.h"

namespace pt::sched {

// ZB-H2 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", section 2.1, figure 3 bottom). As
// ZB-H1 the backward is split into I (input gradient: the previous stage waits for it) and W
// (weight gradient: nobody waits), but each device may hold up to 2S - 1 micro-batches instead
// of S, which buys two things:
//   warm-up: device 0 runs 2S - 1 forwards, exactly what fits before its first I can start
//            (F0 goes down S stages, I0 comes back up S: 2S - 1 time units with F = I = W = 1),
//            device d runs 2(S - d) - 1; nobody waits for its first I;
//   drain:   the I's of the last micro-batches run back to back up the pipeline, and the W's
//            they pass fill the time behind them (the last device defers 2S - 1 W's, device d
//            2d + 1), so the shape is a parallelogram, not ZB-H1's trapezoid.
//
// The lists are the order a list scheduler finds with F = I = W = 1 time unit: at each tick
// every device runs the first of these that is ready (its inputs done by the tick's start):
//   1. its next I (the critical path: the previous stage waits for it),
//   2. its next F, while fewer than min(2S - 1, M) micro-batches are in flight (F done, W not),
//   3. its next W (always the lowest micro-batch whose I is done: W's in ascending order, the
//      rule in generators.h),
// or idles. Ties cannot arise: one rule picks one action. For M >= 2S - 1 every device is
// then busy from its first action to its last, the paper's bubble of 0 (which counts each
// device's own span: the paper starts step k + 1 on each device as soon as step k ends there,
// section 4, bypassing the optimizer synchronisation). Our step ends with every stage's optimizer
// after the global norm, so the parallelogram's offset stays: step time 3M + S - 1 with
// F = I = W = 1, as ZB-H1; ZB-H2 is faster than ZB-H1 where I takes longer than W (the fill
// costs (S - 1)F instead of (S - 1)(F + I - W)). For M < 2S - 1 the warm-up runs out of forwards
// before the first I arrives: device d idles max(0, 2(S - d) - 1 - M) units inside its span and
// the lists degrade to ZB-H1's step time. Timeline for S = 3, M = 5 (render_timeline of
// simulate(zb_h2(3, 5)) with F = I = W = 1):
//
//   t         0    1    2    3    4    5    6    7    8    9    10   11   12   13   14   15   16
//   device 0  0F0  0F1  0F2  0F3  0F4  0I0  0W0  0I1  0W1  0I2  0W2  0I3  0W3  0I4  0W4  .    .
//   device 1  .    1F0  1F1  1F2  1I0  1F3  1I1  1F4  1I2  1W0  1I3  1W1  1I4  1W2  1W3  1W4  .
//   device 2  .    .    2F0  2I0  2F1  2I1  2F2  2I2  2F3  2I3  2F4  2I4  2W0  2W1  2W2  2W3  2W4
Schedule zb_h2(int D, int M) {
  detail::require_shape("zb-h2", D, M);
  Schedule s = empty_schedule(D, D, M);
  const int cap = std::min(2 * D - 1, M);
  constexpr int kNever = -1;  // end time of an action not yet run
  // End tick of F(d, m) and I(d, m); an action can start at tick t when its inputs end <= t.
  std::vector<std::vector<int>> f_end(static_cast<size_t>(D), std::vector<int>(M, kNever));
  std::vector<std::vector<int>> i_end = f_end;
  std::vector<int> f(static_cast<size_t>(D), 0), i(f), w(f);  // next F, I, W per device
  const auto done_by = [](int end, int t) { return end != kNever && end <= t; };
  int finished = 0, idle_ticks = 0;
  for (int t = 0; finished < D; ++t) {
    bool ran = false;
    for (int d = 0; d < D; ++d) {
      const size_t dd = static_cast<size_t>(d);
      auto& list = s.actions[dd];
      const bool i_ready = i[dd] < f[dd] && done_by(f_end[dd][i[dd]], t) &&
                           (d == D - 1 || done_by(i_end[dd + 1][i[dd]], t));
      const bool f_ready =
          f[dd] < M && f[dd] - w[dd] < cap && (d == 0 || done_by(f_end[dd - 1][f[dd]], t));
      const bool w_ready = w[dd] < i[dd] && done_by(i_end[dd][w[dd]], t);
      if (i_ready) {
        list.push_back({d, ActionType::I, i[dd]});
        i_end[dd][i[dd]++] = t + 1;
      } else if (f_ready) {
        list.push_back({d, ActionType::F, f[dd]});
        f_end[dd][f[dd]++] = t + 1;
      } else if (w_ready) {
        list.push_back({d, ActionType::W, w[dd]++});
        if (w[dd] == M) ++finished;
      } else {
        continue;
      }
      ran = true;
    }
    // Something always becomes ready within a tick of the last action; two idle ticks in a row
    // would be a bug in the rules above, not a property of (D, M).
    idle_ticks = ran ? 0 : idle_ticks + 1;
    if (idle_ticks > 1) throw std::logic_error("zb-h2: the list scheduler stalled");
  }
  return s;
}

}  // namespace pt::sched
