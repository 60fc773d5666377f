// measured_stage_times: a simulated step, made into a trace, gives back the per-stage times it
// was simulated with (B, and I/W for the zero-bubble schedules), so simulating again with the
// measured times reproduces the step; the median, not the mean, stands for a stage; a stage
// with no backward in the step is an error naming it.
#include "engine/trace/stage_times.h"

#include <doctest/doctest.h>

#include "engine/core/error.h"
#include "engine/trace/from_simulation.h"
#include "schedule/generators.h"
#include "schedule/simulate.h"

using namespace pt;
using sched::ActionType;

TEST_CASE("stage times: a simulated 1F1B step gives back its unequal per-stage F and B times") {
  const sched::Schedule s = sched::one_f_one_b(3, 6);
  sched::SimConfig config;
  config.stages = {{.f = 1e-3, .b = 2e-3}, {.f = 3e-3, .b = 5e-3}, {.f = 0.5e-3, .b = 4e-3}};
  const sched::SimResult sim = sched::simulate(s, config);
  const std::vector<sched::StageTimes> t =
      measured_stage_times(trace_from_simulation(sim, 1, {}, 7), 7, 3);
  REQUIRE(t.size() == 3);
  for (size_t k = 0; k < 3; ++k) {
    CHECK(t[k].f == doctest::Approx(config.stages[k].f));
    CHECK(t[k].b == doctest::Approx(config.stages[k].b));
  }
  sched::SimConfig again;
  again.stages = t;
  const sched::SimResult replay = sched::simulate(s, again);
  CHECK(replay.step_time == doctest::Approx(sim.step_time));
  for (size_t d = 0; d < 3; ++d)
    CHECK(replay.bubble_fraction[d] == doctest::Approx(sim.bubble_fraction[d]));
}

TEST_CASE("stage times: a zero-bubble step (I and W, no B) leaves b < 0 and measures I and W") {
  const sched::Schedule s = sched::zb_h1(2, 4);
  sched::SimConfig config;
  config.stages = {{.f = 1e-3, .b = -1, .i = 2e-3, .w = 0.5e-3},
                   {.f = 2e-3, .b = -1, .i = 1e-3, .w = 3e-3}};
  const std::vector<sched::StageTimes> t =
      measured_stage_times(trace_from_simulation(sched::simulate(s, config)), 0, 2);
  REQUIRE(t.size() == 2);
  for (size_t k = 0; k < 2; ++k) {
    CHECK(t[k].b < 0);
    CHECK(t[k].f == doctest::Approx(config.stages[k].f));
    CHECK(t[k].i == doctest::Approx(config.stages[k].i));
    CHECK(t[k].w == doctest::Approx(config.stages[k].w));
  }
}

TEST_CASE("stage times: the median stands for a stage, one slow action does not") {
  // Stage 0 on device 0: forwards of 1, 1, 9 ms (the machine stalled once), backwards 2, 2, 2.
  std::vector<std::vector<sched::TimedAction>> timeline(1);
  double t = 0;
  for (int m = 0; m < 3; ++m) {
    const double f = m == 2 ? 9000 : 1000;
    timeline[0].push_back({{0, ActionType::F, m}, t, t + f});
    t += f;
    timeline[0].push_back({{0, ActionType::B, m}, t, t + 2000});
    t += 2000;
  }
  const std::vector<sched::StageTimes> times =
      measured_stage_times(make_trace({"cpu:0"}, timeline), 0, 1);
  CHECK(times[0].f == doctest::Approx(1e-3));
  CHECK(times[0].b == doctest::Approx(2e-3));
}

TEST_CASE("stage times: a stage that ran no backward in the step is named") {
  std::vector<std::vector<sched::TimedAction>> timeline(1);
  timeline[0].push_back({{0, ActionType::F, 0}, 0, 10});
  timeline[0].push_back({{0, ActionType::B, 0}, 10, 20});
  timeline[0].push_back({{1, ActionType::F, 0}, 20, 30});
  CHECK_THROWS_WITH_AS(measured_stage_times(make_trace({"cpu:0"}, timeline), 0, 2),
                       doctest::Contains("no backward of stage 1"), UsageError);
}
