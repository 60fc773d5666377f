#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

#include "schedule/generator_args.h"
#include "schedule/generators.h"

namespace pt::sched {

namespace {

// One device's list as it is written: the next micro-batch of each chunk's F and backward, and
// the W's that zero-bubble backwards deferred, in first-in first-out order (the original's
// WeightGradStore queue). Chunk 0 is stage d, chunk 1 is stage 2D - 1 - d.
class DeviceWriter {
 public:
  DeviceWriter(std::vector<Action>& list, int stage0, int stage1)
      : list_(list), stage_{stage0, stage1} {}

  void forward(int chunk) { list_.push_back({stage_[chunk], ActionType::F, next_f_[chunk]++}); }

  // A full backward B, or (defer_w) its input gradient I now and its W queued for weight().
  void backward(int chunk, bool defer_w) {
    const int s = stage_[chunk], m = next_b_[chunk]++;
    if (!defer_w) {
      list_.push_back({s, ActionType::B, m});
      return;
    }
    list_.push_back({s, ActionType::I, m});
    deferred_w_.push_back({s, ActionType::W, m});
  }

  // The oldest deferred W. The phases below pop exactly as many W's as they defer, and never
  // before deferring them, so the queue is not empty here.
  void weight() {
    if (deferred_w_.empty()) throw std::logic_error("dualpipev: a W with none deferred");
    list_.push_back(deferred_w_.front());
    deferred_w_.pop_front();
  }

  // One overlapped forward-backward pair of the original, as two consecutive actions: F first,
  // then the full B, the order the original runs them in when it does not overlap them.
  void forward_backward(int f_chunk, int b_chunk) {
    forward(f_chunk);
    backward(b_chunk, false);
  }

  bool done() const { return deferred_w_.empty(); }

 private:
  std::vector<Action>& list_;
  int stage_[2];
  int next_f_[2] = {0, 0};
  int next_b_[2] = {0, 0};
  std::deque<Action> deferred_w_;
};

}  // namespace

// DualPipeV: DeepSeek's DualPipe "cut in half" (Sea AI Lab's cut-in-half; deepseek-ai/DualPipe
// dualpipev.py, PyTorch's ScheduleDualPipeV). S = 2D stages in a V: device d holds chunk 0 =
// stage d (the way down) and chunk 1 = stage 2D - 1 - d (the way back), so device 0 holds the
// first and the last stage and device D - 1 hands stage D - 1 to stage D locally. Device d runs
// the original's eight phases (F0 = forward of chunk 0, "&" an overlapped pair):
//   1  2(D - d - 1) x  F0                            warm-up down the V
//   2  (d + 1)      x  F0 F1                         the first micro-batches turn at the bottom
//   3  (D - d - 1)  x  I1 W1 F1                      zero bubble: I first, so device d + 1
//                                                    gets its gradient before this W runs
//   4  (M - 2D + d + 1) x  F0&B1 F1&B0               steady state
//   5  (D - d - 1)  x  B1 F1&B0
//   6  (d + 1)      x  B1 B0       the second half of these as I (W deferred): from pair
//                                  (d + 1) / 2 on, from its B1 when d is odd, its B0 when even
//   7  (D - d - 1)  x  W I0                          a deferred W fills each wait for B0
//   8  (d + 1)      x  W                             the remaining deferred W's
// That is M forwards and M backwards per chunk, and as many W's run (2D - d - 1) as deferred.
// We do not overlap compute within a device: an "F&B" pair runs as F then B, so it takes F + B
// where the original, overlapping them, takes F&B. The W's leave the queue in the order their
// I's entered it; phase 3 runs each W right after its I, and from phase 6 on a chunk, once
// deferring, defers every later backward; so every stage's weight gradients come in ascending
// micro-batch order, as the original's do: no reordering needed (the rule in generators.h).
//
// Needs M >= 2D, the original's condition (phase 4 runs M - 2D + d + 1 >= 1 times on device 0
// only then). For D = 2, M = 4 (device 0 holds stages 0 and 3, device 1 stages 1 and 2), phase
// by phase (tests/schedule/golden/dualpipev_d2_m4.txt):
//
//   phase   device 0          device 1
//   1       0F0 0F1           -
//   2       0F2 3F0           1F0 2F0 1F1 2F1
//   3       3I0 3W0 3F1       -
//   4       0F3 3B1 3F2 0B0   1F2 2B0 2F2 1B0 1F3 2B1 2F3 1B1
//   5       3B2 3F3 0B1       -
//   6       3B3 0I2           2B2 1B2 2I3 1I3
//   7       0W2 0I3           -
//   8       0W3               2W3 1W3
//
// With F = I = W = 1 per stage the simulator gives a step of 6M + D - 1 = 25 (each device idles
// D - 1 = 1; the table's (D - 1)(F&B + B - 3W) with F&B = F + B is 2: a pair's F starts as soon
// as its own input is there, where an overlapped pair waits for both), and holds 2D + 1 = 5
// micro-batches' activations of one stage per device at the peak, the table's PP + 1. The same
// model on the same 2 devices in 1F1B (stages twice as large) takes 6(M + D - 1) = 30; ZB-H1
// 6M + 2(D - 1) = 26 with D micro-batches of a device-sized stage (2D stage-halves) in flight.
Schedule dualpipev(int D, int M) {
  detail::require_shape("dualpipev", D, M);
  if (M < 2 * D)
    throw std::invalid_argument(
        "dualpipev schedule needs at least 2 micro-batches per device, M >= 2D (micro-batches: " +
        std::to_string(M) + ", devices: " + std::to_string(D) + "): use " + std::to_string(2 * D) +
        " or more micro-batches" +
        (M >= 2 ? ", or at most " + std::to_string(M / 2) + " devices" : std::string()) +
        ", or the 1f1b or zb-h1 schedule");
  Schedule s = empty_schedule(D, 2 * D, M);
  for (int k = D; k < 2 * D; ++k) s.stage_device[static_cast<size_t>(k)] = 2 * D - 1 - k;
  for (int d = 0; d < D; ++d) {
    DeviceWriter w(s.actions[static_cast<size_t>(d)], d, 2 * D - 1 - d);
    const int down = D - d - 1;  // devices below this one
    for (int k = 0; k < 2 * down; ++k) w.forward(0);
    for (int k = 0; k <= d; ++k) {
      w.forward(0);
      w.forward(1);
    }
    for (int k = 0; k < down; ++k) {
      w.backward(1, true);
      w.weight();
      w.forward(1);
    }
    for (int k = 0; k < M - 2 * D + d + 1; ++k) {
      w.forward_backward(0, 1);
      w.forward_backward(1, 0);
    }
    for (int k = 0; k < down; ++k) {
      w.backward(1, false);
      w.forward_backward(1, 0);
    }
    const int half = (d + 1) / 2;
    for (int k = 0; k <= d; ++k) {
      w.backward(1, k > half || (k == half && d % 2 == 1));
      w.backward(0, k >= half);
    }
    for (int k = 0; k < down; ++k) {
      w.weight();
      w.backward(0, true);
    }
    for (int k = 0; k <= d; ++k) w.weight();
    if (!w.done()) throw std::logic_error("dualpipev: deferred weight gradients left over");
  }
  return s;
}

}  // namespace pt::sched
