// measure_bubble: hand-computed fractions on a 2-device GPipe trace, the analytic
// (D - 1) / (M + D - 1) for ideal GPipe timelines of several shapes, and agreement with the
// schedule simulator through trace_from_simulation.
#include "engine/trace/bubble.h"

#include <doctest/doctest.h>

#include <string>

#include "engine/core/error.h"
#include "engine/trace/from_simulation.h"
#include "sample_traces.h"
#include "schedule/generators.h"
#include "schedule/simulate.h"

using namespace pt;
using sched::ActionType;

namespace {

// Ideal GPipe on D devices, M micro-batches, free communication: F(d, m) starts at (d + m) t_F;
// the backward phase starts at T = (M + D - 1) t_F and B(d, m) starts at T + (D - 1 - d + m) t_B.
Trace ideal_gpipe(int D, int M, double t_f, double t_b) {
  std::vector<std::vector<sched::TimedAction>> timeline(static_cast<size_t>(D));
  const double backward_start = (M + D - 1) * t_f;
  for (int d = 0; d < D; ++d)
    for (int m = 0; m < M; ++m) {
      const double f = (d + m) * t_f;
      const double b = backward_start + (D - 1 - d + m) * t_b;
      timeline[static_cast<size_t>(d)].push_back({{d, ActionType::F, m}, f, f + t_f});
      timeline[static_cast<size_t>(d)].push_back({{d, ActionType::B, m}, b, b + t_b});
    }
  return make_trace(default_device_names(D), timeline);
}

}  // namespace

TEST_CASE("bubble: hand-computed fractions of a 2-device GPipe trace with communication") {
  const BubbleStats s = measure_bubble(test::gpipe_2x2_trace(), 0);
  CHECK(s.step_span_us == doctest::Approx(940));
  REQUIRE(s.busy_us.size() == 2);
  CHECK(s.busy_us[0] == doctest::Approx(600));  // 2 F of 100 + 2 B of 200; SEND/RECV excluded
  CHECK(s.busy_us[1] == doctest::Approx(600));
  CHECK(s.span_us[0] == doctest::Approx(940));
  CHECK(s.span_us[1] == doctest::Approx(640));
  CHECK(s.bubble_fraction[0] == doctest::Approx(1 - 600.0 / 940));
  CHECK(s.bubble_fraction[1] == doctest::Approx(1 - 600.0 / 940));
  CHECK(s.mean_bubble_fraction() == doctest::Approx(1 - 600.0 / 940));
}

TEST_CASE("bubble: per step, independent of where the step sits in time") {
  Trace trace = test::gpipe_2x2_trace();
  for (const TraceEvent& e : test::gpipe_2x2(1, 5000)) trace.events.push_back(e);
  // A slower step 2 on cpu:1 only: cpu:0 ran nothing, so it is idle the whole step.
  trace.events.push_back(test::event(1, {1, ActionType::F, 0}, 9000, 9300, 2));
  trace.events.push_back(test::event(1, {1, ActionType::SEND_B, 0}, 9300, 9400, 2));

  const BubbleStats s1 = measure_bubble(trace, 1);
  CHECK(s1.step_span_us == doctest::Approx(940));
  CHECK(s1.bubble_fraction[0] == doctest::Approx(1 - 600.0 / 940));

  const BubbleStats s2 = measure_bubble(trace, 2);
  CHECK(s2.step_span_us == doctest::Approx(400));
  CHECK(s2.busy_us[0] == 0);
  CHECK(s2.span_us[0] == 0);
  CHECK(s2.bubble_fraction[0] == doctest::Approx(1));
  CHECK(s2.bubble_fraction[1] == doctest::Approx(0.25));  // 300 of 400 us computing

  CHECK_THROWS_WITH_AS(measure_bubble(trace, 7), doctest::Contains("steps [0, 1, 2]"), UsageError);
}

TEST_CASE("bubble: ideal GPipe matches the analytic (D - 1) / (M + D - 1)") {
  struct Shape {
    int D, M;
  };
  for (Shape shape : {Shape{2, 2}, Shape{4, 8}, Shape{3, 12}, Shape{4, 2}, Shape{1, 4}}) {
    CAPTURE(shape.D);
    CAPTURE(shape.M);
    const BubbleStats s = measure_bubble(ideal_gpipe(shape.D, shape.M, 100, 200), 0);
    const double analytic = (shape.D - 1.0) / (shape.M + shape.D - 1.0);
    CHECK(s.step_span_us == doctest::Approx((shape.M + shape.D - 1) * 300.0));
    for (double f : s.bubble_fraction) CHECK(f == doctest::Approx(analytic));
  }
}

TEST_CASE("bubble: a simulated schedule, converted to a trace, measures what the simulator says") {
  // The benchmarks' comparison in miniature: generator -> simulator -> trace -> measure_bubble,
  // against the simulator's own bubble and the analytic formula (equal stage times, free
  // communication, F = I = W = 1 unit, B = 2).
  struct Case {
    const char* name;
    int D, M;
  };
  for (Case c : {Case{"gpipe", 4, 8}, Case{"1f1b", 3, 12}, Case{"1f1b", 4, 2}}) {
    CAPTURE(c.name);
    CAPTURE(c.D);
    CAPTURE(c.M);
    const sched::SimResult sim = sched::simulate(sched::generate(c.name, c.D, c.M));
    const Trace trace = trace_from_simulation(sim, 1e-3);  // 1 s of the simulator reads as 1 ms
    REQUIRE(trace.device_names.size() == static_cast<size_t>(c.D));
    CHECK(trace.device_names.front() == "sim:0");

    const BubbleStats s = measure_bubble(trace, 0);
    CHECK(s.step_span_us == doctest::Approx(sim.step_time * 1000));
    for (size_t d = 0; d < s.bubble_fraction.size(); ++d) {
      CAPTURE(d);
      CHECK(s.bubble_fraction[d] == doctest::Approx(sim.bubble_fraction[d]));
      CHECK(s.bubble_fraction[d] == doctest::Approx(sched::analytic_bubble(c.name, c.D, c.M)));
    }
  }
  CHECK_THROWS_AS(trace_from_simulation(sched::SimResult{}, 1e-3, {"one name"}), UsageError);
}
