// DualPipeV (schedule/dualpipev.cpp): the V placement and the original's phases on a sweep of
// D = 1..6, M = 2D..16 (the refusal of M < 2D is in generators_test.cpp), and the simulator with
// F = I = W = 1 against DualPipe's published table (bubble (PP/2 - 1)(F&B + B - 3W), activations
// PP + 1 per device).
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "schedule/generators.h"
#include "schedule/lowering.h"
#include "schedule/simulate.h"
#include "schedule/validate.h"

using namespace pt::sched;

namespace {

int count_if(const std::vector<Action>& list, ActionType type) {
  return static_cast<int>(
      std::count_if(list.begin(), list.end(), [&](const Action& a) { return a.type == type; }));
}

SimConfig unit_times() {  // F = I = W = 1 per stage, B = I + W = 2
  SimConfig c;
  c.stages = {StageTimes{1.0, -1.0, 1.0, 1.0}};
  return c;
}

}  // namespace

TEST_CASE("dualpipev: V placement, valid and deadlock-free, D = 1..6, M = 2D..16") {
  int shapes = 0;
  for (int D = 1; D <= 6; ++D)
    for (int M = 2 * D; M <= 16; ++M) {
      CAPTURE(D);
      CAPTURE(M);
      const Schedule s = dualpipev(D, M);
      REQUIRE(s.num_stages == 2 * D);
      for (int k = 0; k < 2 * D; ++k) CHECK(s.device_of(k) == (k < D ? k : 2 * D - 1 - k));
      const Validation compute = validate(s, {Form::ComputeOnly, true});
      CHECK_MESSAGE(compute.ok(), compute.report);
      const Validation lowered =
          validate(add_grad_reduction(add_communication(s)), {Form::Lowered, true});
      CHECK_MESSAGE(lowered.ok(), lowered.report);
      // Weight gradients (B or W) of each stage in ascending micro-batch order, as single-device
      // accumulation (the original's order: nothing reordered).
      std::vector<int> next(static_cast<size_t>(s.num_stages), 0);
      for (const auto& list : s.actions)
        for (const Action& a : list)
          if (a.type == ActionType::W || a.type == ActionType::B)
            CHECK(a.microbatch == next[static_cast<size_t>(a.stage)]++);
      for (int d = 0; d < D; ++d) {
        CAPTURE(d);
        const auto& list = s.actions[static_cast<size_t>(d)];
        // Phases 1-2: 2(D - d - 1) + 2(d + 1) = 2D forwards before the first backward, and on
        // the last device (no phase 3) the F0 of phase 4's first pair.
        const auto first_bwd = std::find_if(
            list.begin(), list.end(), [](const Action& a) { return a.type != ActionType::F; });
        CHECK(first_bwd - list.begin() == 2 * D + (d == D - 1 ? 1 : 0));
        // Deferred W's: D - d - 1 in phase 3, d + 1 in phase 6, D - d - 1 in phase 7.
        CHECK(count_if(list, ActionType::I) == 2 * D - d - 1);
        CHECK(count_if(list, ActionType::B) == 2 * M - (2 * D - d - 1));
        CHECK(count_if(list, ActionType::F) == 2 * M);
      }
      ++shapes;
    }
  CHECK(shapes == 15 + 13 + 11 + 9 + 7 + 5);
}

TEST_CASE("dualpipev: by name, and the table's bubble as analytic_bubble") {
  CHECK(generate("dualpipev", 2, 4) == dualpipev(2, 4));
  const auto names = schedule_names();
  CHECK(std::find(names.begin(), names.end(), "dualpipev") != names.end());
  // (D - 1)(F&B + B - 3W) = 2(D - 1) over a step of 6M + 2(D - 1), with F&B = F + B.
  CHECK(analytic_bubble("dualpipev", 4, 8) == doctest::Approx(6.0 / (48.0 + 6.0)));
}

TEST_CASE("dualpipev: F = I = W = 1 against DualPipe's table (bubble, activations per device)") {
  // The table (deepseek-ai/DualPipe README, DualPipeV row, PP = 2D stages): bubble
  // (PP/2 - 1)(F&B + B - 3W) per device, activations PP + 1 micro-batches of one stage per
  // device. We run each overlapped pair as F then B, so F&B = F + B = 3 here: the table gives
  // 2(D - 1). The simulator finds D - 1: a pair's F waits only for its own input, not for its B's.
  const SimConfig unit = unit_times();
  SimConfig doubled;  // the same model on D devices with one stage each: stages twice as large
  doubled.stages = {StageTimes{2.0, -1.0, 2.0, 2.0}};
  for (int D = 1; D <= 6; ++D)
    for (int M : {2 * D, 2 * D + 1, 16}) {
      CAPTURE(D);
      CAPTURE(M);
      const SimResult r = simulate(dualpipev(D, M), unit);
      const double table_bubble = (D - 1) * ((1.0 + 2.0) + 2.0 - 3.0 * 1.0);
      CHECK(r.step_time == doctest::Approx(6.0 * M + D - 1));
      for (int d = 0; d < D; ++d) {
        CAPTURE(d);
        CHECK(r.busy[static_cast<size_t>(d)] == doctest::Approx(6.0 * M));
        const double idle = r.step_time - r.busy[static_cast<size_t>(d)];
        CHECK(idle == doctest::Approx(D - 1.0));
        CHECK(idle <= table_bubble + 1e-9);
        CHECK(r.peak_inflight_device[static_cast<size_t>(d)] == 2 * D + 1);  // PP + 1
      }
      CHECK(r.mean_bubble_fraction() <= analytic_bubble("dualpipev", D, M) + 1e-12);
      // Against one stage per device: 1F1B 6(M + D - 1), ZB-H1 6M + 2(D - 1).
      const SimResult one = simulate(one_f_one_b(D, M), doubled);
      const SimResult zb = simulate(zb_h1(D, M), doubled);
      CHECK(one.step_time == doctest::Approx(6.0 * (M + D - 1)));
      CHECK(zb.step_time == doctest::Approx(6.0 * M + 2.0 * (D - 1)));
      if (D > 1) CHECK(r.step_time < zb.step_time);
    }
}
