#pragma once
// The timed simulator: how long one step of a schedule takes, and where the bubbles are, from
// per-stage action times alone. It is the dry run (schedule/dry_run.h) with clocks:
//   - each device runs its list in order, one action at a time;
//   - an action starts when its device is free and everything it waits for
//     (schedule/dependencies.h) has finished; a dependency on another device adds the transfer
//     time of the stage boundary between them (0 between stages on one device);
//   - F, B, I, W take their stage's time; SEND takes no device time (non-blocking); a RECV
//     completes at max(device free, send end + transfer), so in a lowered schedule the wait sits
//     on the RECV, in a compute-only one on the compute: both give the same times;
//     REDUCE_GRAD takes no time here.
// Peak in-flight micro-batches of a stage (activations held): +1 at each F, -1 at each W (or B),
// counted in list order, which is the device's execution order. A device holding several stages
// (interleaved, V shapes) peaks at the largest sum over its stages at one point of its list, which
// is at most the sum of their separate peaks: peak_inflight_device.
//
// Time is seconds: stage and transfer times in, step and busy times out (a unit-time run, F = 1,
// is a run of 1-second actions). The timeline alone is in microseconds, like every timeline
// (schedule/timed_action.h): simulate() converts each action's times once, when it writes them.
#include <string>
#include <string_view>
#include <vector>

#include "schedule/schedule.h"
#include "schedule/timed_action.h"

namespace pt::sched {

struct StageTimes {  // seconds
  double f = 1.0;    // forward
  double b = -1.0;   // full backward; < 0: i + w
  double i = 1.0;    // input gradient
  double w = 1.0;    // weight gradient
};

struct SimConfig {
  std::vector<StageTimes> stages;  // one per stage; a single entry applies to every stage;
                                   // empty: StageTimes{}
  std::vector<double> transfer;    // seconds per boundary k (stage k -> k + 1), paid only when
                                   // the two stages are on different devices; a single entry
                                   // applies to every boundary; empty: 0
};

struct SimResult {
  double step_time = 0.0;                          // seconds: the last action's end; starts at 0
  std::vector<double> busy;                        // per device: seconds in F/B/I/W
  std::vector<double> bubble_fraction;             // per device: 1 - busy / step_time
  std::vector<int> peak_inflight;                  // per stage
  std::vector<int> peak_inflight_device;           // per device: its stages' in-flight sum, peak
  std::vector<std::vector<TimedAction>> timeline;  // per device, in list order; microseconds

  double mean_bubble_fraction() const;
};

// Validates `schedule` first (either form) and throws std::invalid_argument with the validator's
// report if it is not valid (a deadlock included); likewise for a SimConfig of the wrong size.
SimResult simulate(const Schedule& schedule, const SimConfig& config = {});

// Per device: the peak over its list of sum_s inflight_s * stage_bytes[s] over the stages s it
// holds (the activation memory the schedule makes it hold at once, when stage s saves
// stage_bytes[s] per micro-batch, >= 0), saturating at the largest long long instead of
// overflowing. stage_bytes has one entry per stage. Throws std::invalid_argument for a wrong size.
std::vector<long long> peak_device_activation_bytes(const Schedule& schedule,
                                                    const std::vector<long long>& stage_bytes);

// The bubble fraction the literature gives, with equal per-stage times and free communication:
//   gpipe, 1f1b        (D - 1) / (M + D - 1)             (Huang et al. 2019; Narayanan et al. 2021)
//   interleaved[:V]    (D - 1) / (V M + D - 1)           (Narayanan et al. 2021: the fill and
//                                                         drain shrink by V; stage times are 1/V)
//                      for M >= D; for M < D the single micro-batch group waits at each chunk
//                      change: (V (D - M) + M - 1) / (V D + M - 1) (interleaved.cpp)
//   zb-h1              (D - 1) / (3 M + D - 1)           (Qi et al. 2023 with F = I = W: a
//                                                         bubble of (D - 1)(F + I - W) per device)
//   zb-h2              (D - 1) / (3 M + D - 1)           the synchronous step's: the paper's 0
//                      counts each device's own span (busy throughout for M >= 2D - 1) and starts
//                      the next step without a flush; ours ends in one, so the (D - 1) F of the
//                      fill remain, as ZB-H1's (D - 1)(F + I - W) when I = W (zb_h2.cpp)
//   dualpipev          (D - 1) / (3 M + D - 1)           (DeepSeek's DualPipe table: (PP/2 - 1)
//                                                         (F&B + B - 3W) per device, PP = 2D
//                                                         stages; F&B = F + B as we do not
//                                                         overlap a pair; F = I = W per stage,
//                                                         step 2M(F + I + W) + that bubble. Our
//                                                         pairs, two actions, simulate below it:
//                                                         (D - 1) / (6 M + D - 1), dualpipev.cpp)
//   zbv                (D - 1) / (6 M + D - 1)           (Qi et al. 2023, ZB-V with F = I = W per
//                                                         chunk: (D-1)(F+B-2W) = 0, plus the fill
//                                                         of D - 1 chunk forwards no V avoids)
//   v-half             D / (2 M)                         (Qi et al. 2024, "~p/2m")
//   v-min              2 D / (3 M)                       (Qi et al. 2024, "~2p/3m")
// `name` is a generate() name; V is taken from "interleaved:V", else from the argument.
double analytic_bubble(std::string_view name, int D, int M, int V = 1);

// The timeline as text, one column per `unit` seconds, for docs and debugging:
//   t         0    1    2    3
//   device 0  0F0  0F1  0B0  ---
// Zero-time actions (SEND, RECV, REDUCE_GRAD) are not drawn; '.' is idle.
std::string render_timeline(const SimResult& result, double unit = 1.0);

}  // namespace pt::sched
