// The asynchronous window (PipeDream-2BW): one_f_one_b_async's lists, UPDATE's text form, the
// validator's version rules, the least weight delay each stage allows, and the simulator's
// bubble paid once per window.
#include <doctest/doctest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "schedule/generators.h"
#include "schedule/lowering.h"
#include "schedule/simulate.h"
#include "schedule/validate.h"
#include "schedule/weight_delay.h"

using namespace pt::sched;

namespace {

std::string joined(const std::vector<Action>& list) {
  std::string out;
  for (const Action& a : list) {
    if (!out.empty()) out += ' ';
    out += a.str();
  }
  return out;
}

bool report_has(const Schedule& s, const std::string& text) {
  const Validation v = validate(s);
  return !v.ok() && v.report.find(text) != std::string::npos;
}

}  // namespace

TEST_CASE("UPDATE prints and parses with its step") {
  CHECK(Action{1, ActionType::UPDATE, 2}.str() == "1UPDATE2");
  CHECK(*parse_action("1UPDATE2") == Action{1, ActionType::UPDATE, 2});
  CHECK_FALSE(parse_action("1UPDATE").has_value());
  CHECK_FALSE(has_microbatch(ActionType::UPDATE));
  CHECK_FALSE(is_compute(ActionType::UPDATE));
}

TEST_CASE("one_f_one_b_async golden: D=2 M=2 K=2") {
  const Schedule s = one_f_one_b_async(2, 2, 2);
  CHECK(s.steps == 2);
  CHECK(s.microbatches == 4);
  CHECK(joined(s.actions[0]) == "0F0 0F1 0B0 0F2 0B1 0UPDATE0 0F3 0B2 0B3 0UPDATE1");
  CHECK(joined(s.actions[1]) == "1F0 1B0 1F1 1B1 1UPDATE0 1F2 1B2 1F3 1B3 1UPDATE1");
}

TEST_CASE("one_f_one_b_async sweep: valid, lowered, no deadlock, one UPDATE per stage and step") {
  int count = 0;
  for (int D = 1; D <= 5; ++D)
    for (int M = std::max(1, D - 1); M <= 8; ++M)
      for (int K = 1; K <= 4; ++K) {
        CAPTURE(D);
        CAPTURE(M);
        CAPTURE(K);
        const Schedule s = one_f_one_b_async(D, M, K);
        const Validation v = validate(s, {Form::ComputeOnly, true});
        REQUIRE_MESSAGE(v.ok(), v.report);
        const Schedule lowered = add_communication(s);
        const Validation low = validate(lowered, {Form::Lowered, true});
        REQUIRE_MESSAGE(low.ok(), low.report);
        for (int d = 0; d < D; ++d) {
          const auto& list = s.actions[static_cast<size_t>(d)];
          CHECK(std::count_if(list.begin(), list.end(),
                              [](const Action& a) { return a.type == ActionType::UPDATE; }) == K);
          CHECK(list.back().type == ActionType::UPDATE);
        }
        // The bubble is paid once per window: the same time as 1F1B over K*M micro-batches
        // (UPDATE costs nothing in the simulator), (KM + D - 1)(F + B) with F = B.
        SimConfig c;
        c.stages = {StageTimes{1.0, 1.0, 0.5, 0.5}};
        CHECK(simulate(lowered, c).step_time == doctest::Approx(2.0 * (K * M + D - 1)));
        ++count;
      }
  CHECK(count > 100);
}

// --async-delay per-stage binds the least delay the lists allow: the last stage computes step t
// with W(t) (its UPDATE(t - 1) precedes step t's first forward), the others with W(t - 1).
TEST_CASE("least_weight_delay: 0 on 1F1B's last stage, 1 before it; more when UPDATE is late") {
  for (int D = 1; D <= 5; ++D)
    for (int M = std::max(1, D - 1); M <= 6; ++M)
      for (int K = 2; K <= 3; ++K) {
        CAPTURE(D);
        CAPTURE(M);
        CAPTURE(K);
        const Schedule s = one_f_one_b_async(D, M, K);
        for (int stage = 0; stage < D; ++stage)
          CHECK(least_weight_delay(s, stage) == (stage == D - 1 ? 0 : 1));
        // One window of one step: nothing to wait for.
        CHECK(least_weight_delay(one_f_one_b_async(D, M, 1), 0) == 0);
      }
  // 1UPDATE0 moved after 1F2 (step 1's first forward): the last stage now needs W(t - 1).
  Schedule s = one_f_one_b_async(2, 2, 2);  // device 1: 1F0 1B0 1F1 1B1 1UPDATE0 1F2 ...
  std::swap(s.actions[1][4], s.actions[1][5]);
  CHECK(least_weight_delay(s, 1) == 1);
  CHECK(least_weight_delay(s, 0) == 1);
}

// --async-delay per-microbatch: on stage s only the first D - 1 - s micro-batches of a step start
// before the stage's UPDATE of the step before; the stage's delay is the largest of them.
TEST_CASE("least_microbatch_delays: 1 for a step's first D - 1 - stage micro-batches, else 0") {
  for (int D = 1; D <= 5; ++D)
    for (int M = std::max(1, D - 1); M <= 6; ++M)
      for (int K = 1; K <= 3; ++K) {
        CAPTURE(D);
        CAPTURE(M);
        CAPTURE(K);
        const Schedule s = one_f_one_b_async(D, M, K);
        for (int stage = 0; stage < D; ++stage) {
          CAPTURE(stage);
          const std::vector<int> d = least_microbatch_delays(s, stage);
          REQUIRE(d.size() == static_cast<size_t>(M));
          for (int m = 0; m < M; ++m)
            CHECK(d[static_cast<size_t>(m)] == (K > 1 && m < D - 1 - stage ? 1 : 0));
          CHECK(*std::max_element(d.begin(), d.end()) == least_weight_delay(s, stage));
        }
      }
}

TEST_CASE("one_f_one_b_async refuses M < D - 1 and K < 1") {
  CHECK_THROWS_AS(one_f_one_b_async(4, 2, 3), std::invalid_argument);
  CHECK_THROWS_AS(one_f_one_b_async(2, 4, 0), std::invalid_argument);
  CHECK_NOTHROW(one_f_one_b_async(4, 3, 3));
}

TEST_CASE("validator: UPDATE order against the weight versions") {
  SUBCASE("an UPDATE before one of its step's backwards") {
    Schedule s = one_f_one_b_async(2, 2, 2);
    auto& l = s.actions[0];  // 0F0 0F1 0B0 0F2 0B1 0UPDATE0 ...
    std::swap(l[4], l[5]);
    CHECK(report_has(s, "0UPDATE0 runs before 0B1, whose gradient it applies"));
  }
  SUBCASE("a backward of the next step before the UPDATE") {
    Schedule s = one_f_one_b_async(1, 2, 2);  // 0F0 0B0 0F1 0B1 0UPDATE0 0F2 0B2 ...
    auto& l = s.actions[0];
    l.erase(l.begin() + 4);
    l.insert(l.begin() + 7, Action{0, ActionType::UPDATE, 0});
    CHECK(report_has(s, "0B2 runs before 0UPDATE0"));
  }
  SUBCASE("a forward of step k + 2 before UPDATE(k): a third version") {
    Schedule s;
    s.num_devices = s.num_stages = 1;
    s.microbatches = 3;
    s.steps = 3;
    s.stage_device = {0};
    s.actions = {{{0, ActionType::F, 0},
                  {0, ActionType::F, 1},
                  {0, ActionType::F, 2},
                  {0, ActionType::B, 0},
                  {0, ActionType::UPDATE, 0},
                  {0, ActionType::B, 1},
                  {0, ActionType::UPDATE, 1},
                  {0, ActionType::B, 2},
                  {0, ActionType::UPDATE, 2}}};
    CHECK(report_has(s, "0F2 runs before 0UPDATE0, which needs the weights it writes"));
  }
  SUBCASE("a missing UPDATE, and one outside the steps") {
    Schedule s = one_f_one_b_async(2, 2, 2);
    s.actions[1].pop_back();
    CHECK(report_has(s, "stage 1 has no 1UPDATE1"));
    s.actions[1].push_back({1, ActionType::UPDATE, 2});
    CHECK(report_has(s, "1UPDATE2 names step 2, outside 0..1"));
  }
}
