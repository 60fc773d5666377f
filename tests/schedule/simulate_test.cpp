// The timed simulator against the closed forms of the papers, and its semantics on small cases.
#include <doctest/doctest.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "schedule/generators.h"
#include "schedule/lowering.h"
#include "schedule/simulate.h"
#include "schedule/text_format.h"
#include "tests/schedule/sweep.h"

using namespace pt::sched;

namespace {

SimConfig times(double f, double b, double i = 0.5, double w = 0.5, double transfer = 0.0) {
  SimConfig c;
  c.stages = {StageTimes{f, b, i, w}};
  if (transfer > 0.0) c.transfer = {transfer};
  return c;
}

}  // namespace

TEST_CASE("gpipe and 1f1b with F = B: step (M + D - 1)(F + B), bubble as the formula") {
  for (int D = 1; D <= 5; ++D)
    for (int M = 1; M <= 9; ++M)
      for (const char* name : {"gpipe", "1f1b"}) {
        CAPTURE(name);
        CAPTURE(D);
        CAPTURE(M);
        const SimResult r = simulate(generate(name, D, M), times(1.0, 1.0));
        CHECK(r.step_time == doctest::Approx((M + D - 1) * 2.0));
        for (double b : r.bubble_fraction) CHECK(b == doctest::Approx(analytic_bubble(name, D, M)));
        for (double busy : r.busy) CHECK(busy == doctest::Approx(2.0 * M));
      }
}

TEST_CASE("zb-h1 beats 1f1b when F = I = W, and meets the paper's bubble for M >= D") {
  const SimConfig equal = times(1.0, -1.0, 1.0, 1.0);  // B = I + W = 2
  for (int D = 2; D <= 5; ++D)
    for (int M = 1; M <= 9; ++M) {
      CAPTURE(D);
      CAPTURE(M);
      const SimResult zb = simulate(zb_h1(D, M), equal);
      const SimResult base = simulate(one_f_one_b(D, M), equal);
      CHECK(zb.step_time < base.step_time);
      if (M >= D) {
        CHECK(zb.step_time == doctest::Approx(3.0 * M + D - 1));
        CHECK(zb.mean_bubble_fraction() == doctest::Approx(analytic_bubble("zb-h1", D, M)));
      }
    }
  // One device: nothing to overlap.
  CHECK(simulate(zb_h1(1, 4), equal).step_time == doctest::Approx(12.0));
}

TEST_CASE("peak in-flight micro-batches: 1f1b min(D - s, M), gpipe M, zb-h1 at most 1f1b's peak") {
  for (int D = 1; D <= 5; ++D)
    for (int M = 1; M <= 9; ++M) {
      CAPTURE(D);
      CAPTURE(M);
      const SimResult one = simulate(one_f_one_b(D, M));
      const SimResult fill = simulate(gpipe(D, M));
      const SimResult zb = simulate(zb_h1(D, M));
      for (int s = 0; s < D; ++s) {
        CAPTURE(s);
        CHECK(one.peak_inflight[static_cast<size_t>(s)] == std::min(D - s, M));
        CHECK(fill.peak_inflight[static_cast<size_t>(s)] == M);
        CHECK(zb.peak_inflight[static_cast<size_t>(s)] <= std::min(D, M));
      }
      CHECK(*std::max_element(zb.peak_inflight.begin(), zb.peak_inflight.end()) ==
            *std::max_element(one.peak_inflight.begin(), one.peak_inflight.end()));
      // One stage per device: a device holds what its stage holds.
      CHECK(one.peak_inflight_device == one.peak_inflight);
      CHECK(zb.peak_inflight_device == zb.peak_inflight);
    }
}

TEST_CASE("interleaved: smaller bubble than 1f1b, as the formula, when each chunk takes 1/V") {
  // Megatron's (D - 1) / (V M + D - 1) for every M >= D, multiple of D or not (the remainder is
  // spread over the groups); for M < D the one group waits D - M at each chunk change:
  // (V (D - M) + M - 1) / (V D + M - 1), still below 1F1B's (D - 1) / (M + D - 1) for M >= 2.
  for (int D = 2; D <= 6; ++D)
    for (int M = 1; M <= 16; ++M)
      for (int V : {2, 3}) {
        CAPTURE(D);
        CAPTURE(M);
        CAPTURE(V);
        const SimResult inter = simulate(interleaved(D, M, V), times(1.0 / V, 1.0 / V));
        const SimResult base = simulate(one_f_one_b(D, M), times(1.0, 1.0));
        const double d = D - 1.0, v = V;
        const double expected =
            M >= D ? d / (v * M + d) : (v * (D - M) + M - 1.0) / (v * D + M - 1.0);
        for (double b : inter.bubble_fraction) CHECK(b == doctest::Approx(expected));
        // Megatron's form, bubble time over ideal time: (D - 1) / (V M) for M >= D.
        const double over_ideal = M >= D ? d / (v * M) : (v * (D - M) + M - 1.0) / (v * M);
        for (double busy : inter.busy)
          CHECK((inter.step_time - busy) / busy == doctest::Approx(over_ideal));
        CHECK(analytic_bubble("interleaved", D, M, V) == doctest::Approx(expected));
        CHECK(analytic_bubble("interleaved:" + std::to_string(V), D, M) ==
              analytic_bubble("interleaved", D, M, V));
        if (M >= 2) {
          CHECK(inter.mean_bubble_fraction() < base.mean_bubble_fraction());
          CHECK(inter.step_time < base.step_time);
        } else {
          CHECK(inter.step_time == doctest::Approx(base.step_time));  // one micro-batch: a chain
        }
      }
}

TEST_CASE("interleaved: device 0 holds (V - 1) G + 2(D - 1) + 1 chunk activations") {
  // G the largest micro-batch group: D when M % D == 0 (Megatron), D + ceil(r / n) otherwise.
  auto held = [](const Schedule& s) {  // the most chunk activations device 0 holds at once
    int now = 0, peak = 0;
    for (const Action& a : s.actions[0]) {
      now += a.type == ActionType::F ? 1 : -1;
      peak = std::max(peak, now);
    }
    return peak;
  };
  CHECK(held(interleaved(4, 8, 2)) == 4 + 6 + 1);
  CHECK(held(interleaved(4, 9, 2)) == 5 + 6 + 1);       // groups of 5 and 4
  CHECK(held(interleaved(4, 11, 3)) == 2 * 6 + 6 + 1);  // groups of 6 and 5
  CHECK(held(interleaved(3, 2, 2)) == 2 * 2);           // M < D: everything, M V
}

TEST_CASE("zb-h2: every device busy through its span iff M >= 2D - 1; step as zb-h1 when I = W") {
  const SimConfig equal = times(1.0, -1.0, 1.0, 1.0);  // F = I = W = 1, B = I + W
  for (int D = 1; D <= 6; ++D)
    for (int M = 1; M <= 16; ++M) {
      CAPTURE(D);
      CAPTURE(M);
      const SimResult zb = simulate(zb_h2(D, M), equal);
      for (int d = 0; d < D; ++d) {
        CAPTURE(d);
        const auto& t = zb.timeline[static_cast<size_t>(d)];
        const double span = (t.back().end_us - t.front().start_us) / kMicrosecondsPerSecond;
        const double idle_in_span = span - zb.busy[static_cast<size_t>(d)];
        // The paper's bubble: 0 from the first action to the last once the warm-up's
        // 2(D - d) - 1 forwards exist; below that, device d waits for its first I.
        CHECK(idle_in_span == doctest::Approx(std::max(0, 2 * (D - d) - 1 - M)));
      }
      // Peak in flight: 2D - 1 on the first stage (the warm-up), never more anywhere.
      CHECK(zb.peak_inflight[0] == std::min(2 * D - 1, M));
      for (int p : zb.peak_inflight) CHECK(p <= std::min(2 * D - 1, M));
      // With a synchronous step the parallelogram's offset stays: zb-h1's step time.
      const SimResult h1 = simulate(zb_h1(D, M), equal);
      CHECK(zb.step_time == doctest::Approx(h1.step_time));
      if (M >= D) {
        CHECK(zb.step_time == doctest::Approx(3.0 * M + D - 1));
        CHECK(zb.mean_bubble_fraction() == doctest::Approx(analytic_bubble("zb-h2", D, M)));
      }
    }
}

TEST_CASE("zb-h2 beats zb-h1 when I > W: its fill costs (D - 1) F, not (D - 1)(F + I - W)") {
  const SimConfig slow_i = times(1.0, -1.0, 1.5, 0.5);
  for (int D = 2; D <= 6; ++D)
    for (int M = 2 * D - 1; M <= 2 * D + 4; ++M) {
      CAPTURE(D);
      CAPTURE(M);
      const double h2 = simulate(zb_h2(D, M), slow_i).step_time;
      const double h1 = simulate(zb_h1(D, M), slow_i).step_time;
      CHECK(h1 == doctest::Approx(3.0 * M + (D - 1) * 2.0));  // ZB-H1's formula
      CHECK(h2 < h1);
      CHECK(h2 >= 3.0 * M + (D - 1) * 1.0);  // no schedule beats the last device's fill + work
    }
}

TEST_CASE("lowered and compute-only schedules take the same time, transfers included") {
  for (const auto& g : test::sweep_schedules(4, 6)) {
    CAPTURE(g.label());
    const SimConfig c = times(1.0, 2.0, 1.0, 1.0, 0.25);
    const SimResult plain = simulate(g.schedule, c);
    const SimResult lowered = simulate(add_communication(g.schedule), c);
    CHECK(plain.step_time == doctest::Approx(lowered.step_time));
    CHECK(plain.busy == lowered.busy);
    CHECK(plain.peak_inflight == lowered.peak_inflight);
  }
}

TEST_CASE("simulator semantics on hand-computed cases") {
  // gpipe D=2 M=1, F = B = 1 s, transfer 0.5 s: F0 [0,1], F1 [1.5,2.5], B1 [2.5,3.5], B0 [4,5];
  // the step in seconds, the timeline in microseconds.
  const SimResult r = simulate(add_communication(gpipe(2, 1)), times(1.0, 1.0, 0.5, 0.5, 0.5));
  CHECK(r.step_time == doctest::Approx(5.0));
  const auto& dev1 = r.timeline[1];  // 1RECV_F0 1F0 1B0 1SEND_B0
  REQUIRE(dev1.size() == 4);
  CHECK(dev1[0].action.str() == "1RECV_F0");
  CHECK(dev1[0].end_us == doctest::Approx(1.5e6));  // send end 1 s + transfer 0.5 s
  CHECK(dev1[1].start_us == doctest::Approx(1.5e6));
  CHECK(r.timeline[0].back().start_us == doctest::Approx(4.0e6));
  CHECK(r.busy[0] == doctest::Approx(2.0));
  CHECK(r.bubble_fraction[0] == doctest::Approx(1.0 - 2.0 / 5.0));

  // Adjacent stages on one device hand off locally: no transfer time.
  const Schedule local = parse_schedule_text(
      "pipeline devices=1 stages=2 microbatches=1\n"
      "device 0: 0F0 1F0 1B0 0B0\n");
  CHECK(simulate(local, times(1.0, 1.0, 0.5, 0.5, 10.0)).step_time == doctest::Approx(4.0));

  // Per-stage times: a slow last stage sets the pace of 1F1B's steady state.
  SimConfig slow;
  slow.stages = {StageTimes{1, 1, 0.5, 0.5}, StageTimes{1, 1, 0.5, 0.5}, StageTimes{2, 2, 1, 1}};
  const SimResult paced = simulate(one_f_one_b(3, 6), slow);
  CHECK(paced.busy[2] == doctest::Approx(24.0));
  CHECK(paced.step_time >= 24.0 + 2.0 + 2.0);  // + the fill and drain through the fast stages

  // B defaults to I + W.
  CHECK(simulate(gpipe(1, 1), times(1.0, -1.0, 0.25, 0.5)).step_time == doctest::Approx(1.75));
}

TEST_CASE("simulate refuses invalid schedules and mis-sized configs") {
  Schedule stuck = one_f_one_b(2, 2);
  std::swap(stuck.actions[1][0], stuck.actions[1][2]);  // 1F1 1B0 1F0 1B1: B before its F
  CHECK_THROWS_WITH_AS(simulate(stuck), doctest::Contains("<-- ERROR HERE"), std::invalid_argument);
  SimConfig wrong;
  wrong.stages = {StageTimes{}, StageTimes{}, StageTimes{}};
  CHECK_THROWS_WITH_AS(simulate(gpipe(2, 2), wrong),
                       doctest::Contains("3 stage times for 2 stages"), std::invalid_argument);
  wrong.stages.clear();
  wrong.transfer = {1.0, 2.0};
  CHECK_THROWS_WITH_AS(simulate(gpipe(2, 2), wrong),
                       doctest::Contains("2 transfer times for 1 stage boundaries"),
                       std::invalid_argument);
  CHECK_THROWS_AS(analytic_bubble("pipedream", 2, 2), std::invalid_argument);
}

TEST_CASE("render_timeline draws the clock table") {
  const std::string table = render_timeline(simulate(one_f_one_b(2, 2), times(1.0, 1.0)));
  CHECK(table ==
        "t         0    1    2    3    4    5\n"
        "device 0  0F0  0F1  .    0B0  .    0B1\n"
        "device 1  .    1F0  1B0  1F1  1B1  .\n");
}
