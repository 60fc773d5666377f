// V-shaped schedules (zbv, v-half, v-min): the validator on D = 1..6, M = 1..16, compute-only and
// lowered; the V placement; and, with F = I = W = 1 per chunk, the simulator's bubble and peak
// activation memory per device against the papers' figures and against 1F1B.
#include <doctest/doctest.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "schedule/generators.h"
#include "schedule/lowering.h"
#include "schedule/simulate.h"
#include "schedule/validate.h"
#include "tests/schedule/sweep.h"

using namespace pt::sched;

namespace {

const SimConfig kUnit{{StageTimes{1.0, -1.0, 1.0, 1.0}}, {}};  // F = I = W = 1, B = 2

// Chunk activations a device may hold (v_shape.cpp): 1F1B's device 0 holds D micro-batches of a
// full stage, i.e. 2D chunk activations.
int memory_limit(const std::string& name, int D) {
  if (name == "zbv") return 2 * D;
  if (name == "v-half") return std::min(2 * D, D + 2);
  return std::min(2 * D, 2 * ((D + 4) / 3) + 1);  // v-min
}

int max_of(const std::vector<int>& v) { return *std::max_element(v.begin(), v.end()); }

}  // namespace

TEST_CASE("v shapes: every D = 1..6, M = 1..16 validates, compute-only and lowered") {
  for (const std::string& name : test::kVShapes)
    for (int D = 1; D <= 6; ++D)
      for (int M = 1; M <= 16; ++M) {
        CAPTURE(name);
        CAPTURE(D);
        CAPTURE(M);
        const Schedule s = generate(name, D, M);
        REQUIRE(s.num_stages == 2 * D);
        for (int k = 0; k < D; ++k) {
          CHECK(s.device_of(k) == k);
          CHECK(s.device_of(2 * D - 1 - k) == k);
        }
        const Validation compute = validate(s, {Form::ComputeOnly, true});
        CHECK_MESSAGE(compute.ok(), compute.report);
        const Schedule lowered = add_grad_reduction(add_communication(s));
        const Validation low = validate(lowered, {Form::Lowered, true});
        CHECK_MESSAGE(low.ok(), low.report);
        // Stages D - 1 and D share device D - 1: a local hand-off, no SEND/RECV between them.
        for (const auto& list : lowered.actions)
          for (const Action& a : list)
            CHECK_FALSE(((a.type == ActionType::SEND_F && a.stage == D - 1) ||
                         (a.type == ActionType::SEND_B && a.stage == D)));
        // W of each stage in ascending micro-batch order (bit-for-bit parity needs it).
        std::vector<int> next(static_cast<size_t>(s.num_stages), 0);
        for (const auto& list : s.actions)
          for (const Action& a : list) {
            CHECK(a.type != ActionType::B);
            if (a.type == ActionType::W)
              CHECK(a.microbatch == next[static_cast<size_t>(a.stage)]++);
          }
        // The limit the scheduler kept.
        const SimResult r = simulate(s, kUnit);
        CHECK(max_of(r.peak_inflight_device) <= memory_limit(name, D));
      }
}

TEST_CASE("zbv: step 6M + D - 1 (zero bubble beyond the fill) for M >= 2D, at 1F1B's memory") {
  for (int D = 1; D <= 6; ++D)
    for (int M = 2 * D; M <= 16; ++M) {
      CAPTURE(D);
      CAPTURE(M);
      const SimResult r = simulate(zbv(D, M), kUnit);
      // Every device does 6M units; device D - 1 cannot start before D - 1 forwards ran.
      CHECK(r.step_time == doctest::Approx(6.0 * M + D - 1));
      for (double busy : r.busy) CHECK(busy == doctest::Approx(6.0 * M));
      CHECK(r.mean_bubble_fraction() == doctest::Approx(analytic_bubble("zbv", D, M)));
      // 1F1B holds D micro-batches of a full stage on device 0: 2D chunk activations.
      const SimResult base = simulate(one_f_one_b(D, M));
      CHECK(max_of(r.peak_inflight_device) == 2 * max_of(base.peak_inflight));
      // ... and 1F1B with the same work per device (F = 2, B = 4) has a bubble of (D-1)/(M+D-1).
      if (D > 1) CHECK(r.mean_bubble_fraction() < analytic_bubble("1f1b", D, M));
    }
}

TEST_CASE("v-half and v-min: about 1/2 and 1/3 of 1F1B's activations, bubble as the paper") {
  for (int D = 3; D <= 8; ++D) {
    const int M = 8 * D;
    CAPTURE(D);
    const SimResult base = simulate(one_f_one_b(D, M));
    const int one_f_one_b_chunks = 2 * max_of(base.peak_inflight);  // 2D
    const SimResult zero = simulate(zbv(D, M), kUnit);
    const SimResult half = simulate(v_half(D, M), kUnit);
    const SimResult min = simulate(v_min(D, M), kUnit);
    // Memory: the paper's (D+2)/2 and (D+4)//3 micro-batches of a full stage (the latter + 1
    // chunk).
    CHECK(max_of(half.peak_inflight_device) == D + 2);
    CHECK(max_of(min.peak_inflight_device) == std::min(2 * D, 2 * ((D + 4) / 3) + 1));
    CHECK(max_of(half.peak_inflight_device) < one_f_one_b_chunks);
    CHECK(max_of(min.peak_inflight_device) <= max_of(half.peak_inflight_device));
    // Bubble: the paper's ~D/2M and ~2D/3M; the less memory, the larger the bubble.
    CHECK(half.mean_bubble_fraction() <= 1.25 * analytic_bubble("v-half", D, M));
    CHECK(min.mean_bubble_fraction() <= 1.4 * analytic_bubble("v-min", D, M));
    CHECK(half.mean_bubble_fraction() > zero.mean_bubble_fraction());
    CHECK(min.mean_bubble_fraction() >= half.mean_bubble_fraction());
  }
}

TEST_CASE("peak_device_activation_bytes: the sum over a device's stages at one point of its list") {
  // Device 0 holds stages 0 and 3 of zbv(2, 1): 0F0 3F0 3I0 3W0 0I0 0W0 in some order; with
  // bytes 10 (stage 0) and 1 (stage 3), both are held at once: 11.
  const Schedule s = zbv(2, 1);
  const auto bytes = peak_device_activation_bytes(s, {10, 100, 1000, 1});
  REQUIRE(bytes.size() == 2);
  CHECK(bytes[0] == 11);
  CHECK(bytes[1] == 1100);
  CHECK_THROWS_AS(peak_device_activation_bytes(s, {1, 2}), std::invalid_argument);
}

TEST_CASE("v shapes: names and refusals") {
  const std::vector<std::string> names = schedule_names();
  for (const std::string& name : test::kVShapes) {
    CHECK(std::find(names.begin(), names.end(), name) != names.end());
    CHECK_THROWS_WITH_AS(generate(name, 0, 4), doctest::Contains("devices: 0"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(generate(name, 2, 0), doctest::Contains("micro-batches: 0"),
                         std::invalid_argument);
  }
  CHECK(generate("zbv", 3, 6) == zbv(3, 6));
  CHECK(generate("v-half", 3, 6) == v_half(3, 6));
  CHECK(generate("v-min", 3, 6) == v_min(3, 6));
}
