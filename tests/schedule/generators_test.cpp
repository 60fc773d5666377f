// Generators: every shape of the sweep validates and dry-runs, compute-only and lowered; weight
// gradients run in ascending micro-batch order; the dispatcher's names and errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "schedule/generators.h"
#include "schedule/lowering.h"
#include "schedule/text_format.h"
#include "schedule/validate.h"
#include "tests/schedule/sweep.h"

using namespace pt::sched;

namespace {

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no exception)";
}

}  // namespace

TEST_CASE("sweep: every generated schedule validates and runs without deadlock") {
  int count = 0;
  for (const auto& g : test::sweep_schedules(6, 16)) {
    CAPTURE(g.label());
    const Validation compute = validate(g.schedule, {Form::ComputeOnly, true});
    CHECK_MESSAGE(compute.ok(), compute.report);
    const Schedule lowered = add_communication(g.schedule);
    const Validation low = validate(lowered, {Form::Lowered, true});
    CHECK_MESSAGE(low.ok(), low.report);
    const Schedule reduced = add_grad_reduction(lowered);
    const Validation red = validate(reduced, {Form::Lowered, true});
    CHECK_MESSAGE(red.ok(), red.report);
    // REDUCE_GRAD(s) sits right after the last B/W of s, once per stage.
    int reduces = 0;
    for (const auto& list : reduced.actions)
      for (size_t i = 0; i < list.size(); ++i) {
        if (list[i].type != ActionType::REDUCE_GRAD) continue;
        ++reduces;
        REQUIRE(i > 0);
        CHECK((list[i - 1].type == ActionType::B || list[i - 1].type == ActionType::W));
        CHECK(list[i - 1].stage == list[i].stage);
        for (size_t k = i + 1; k < list.size(); ++k)
          CHECK_FALSE(((list[k].type == ActionType::B || list[k].type == ActionType::W) &&
                       list[k].stage == list[i].stage));
      }
    CHECK(reduces == g.schedule.num_stages);
    CHECK_THROWS_AS(add_grad_reduction(reduced), std::invalid_argument);
    ++count;
  }
  // per shape: 4 generators, 3 V shapes, interleaved:2 and :3; dualpipev where M >= 2D
  CHECK(count == 6 * 16 * (4 + 3 + 2) + (15 + 13 + 11 + 9 + 7 + 5));
}

TEST_CASE("sweep: generators emit compute actions only, with the right shape") {
  for (const auto& g : test::sweep_schedules()) {
    CAPTURE(g.label());
    const Schedule& s = g.schedule;
    CHECK(s.num_devices == g.D);
    CHECK(s.microbatches == g.M);
    const bool dualpipev = g.name == "dualpipev";  // B and I/W mixed: its own tests
    const bool v_placed = dualpipev || test::is_v_shape(g.name);
    const int V = g.name.starts_with("interleaved:") ? std::stoi(g.name.substr(12))
                  : v_placed                         ? 2
                                                     : 1;
    CHECK(s.num_stages == g.D * V);
    for (int k = 0; k < s.num_stages; ++k)
      CHECK(s.device_of(k) == (v_placed && k >= g.D ? 2 * g.D - 1 - k : k % g.D));
    for (const auto& list : s.actions)
      for (const Action& a : list) CHECK(is_compute(a.type));
    const bool split = g.name == "zb-h1" || g.name == "zb-h2" || test::is_v_shape(g.name);
    for (const auto& list : s.actions)
      for (const Action& a : list) {
        if (split)
          CHECK(a.type != ActionType::B);
        else if (!dualpipev)
          CHECK((a.type == ActionType::F || a.type == ActionType::B));
      }
  }
}

TEST_CASE("sweep: weight gradients of each stage in ascending micro-batch order") {
  // Single-device training accumulates dW for m = 0..M-1; the parity tests need the same order.
  for (const auto& g : test::sweep_schedules()) {
    CAPTURE(g.label());
    std::vector<int> next(static_cast<size_t>(g.schedule.num_stages), 0);
    for (const auto& list : g.schedule.actions)
      for (const Action& a : list)
        if (a.type == ActionType::W || a.type == ActionType::B) {
          CAPTURE(a.str());
          CHECK(a.microbatch == next[static_cast<size_t>(a.stage)]);
          ++next[static_cast<size_t>(a.stage)];
        }
    for (int n : next) CHECK(n == g.M);
  }
}

TEST_CASE("sweep: forwards of each stage in ascending micro-batch order") {
  // Stage 0 reads micro-batches from the data loader in order; every generator keeps it.
  for (const auto& g : test::sweep_schedules()) {
    CAPTURE(g.label());
    std::vector<int> next(static_cast<size_t>(g.schedule.num_stages), 0);
    for (const auto& list : g.schedule.actions)
      for (const Action& a : list)
        if (a.type == ActionType::F) CHECK(a.microbatch == next[static_cast<size_t>(a.stage)]++);
  }
}

TEST_CASE("1f1b: warm-up of min(D - d - 1, M) forwards on device d") {
  for (int D = 1; D <= 5; ++D)
    for (int M = 1; M <= 9; ++M) {
      const Schedule s = one_f_one_b(D, M);
      for (int d = 0; d < D; ++d) {
        const auto& list = s.actions[static_cast<size_t>(d)];
        const auto first_b = std::find_if(list.begin(), list.end(),
                                          [](const Action& a) { return a.type == ActionType::B; });
        const int forwards_before = static_cast<int>(first_b - list.begin());
        CAPTURE(D);
        CAPTURE(M);
        CAPTURE(d);
        // The warm-up plus the steady phase's first forward (when forwards remain).
        const int warmup = std::min(D - d - 1, M);
        CHECK(forwards_before == warmup + (warmup < M ? 1 : 0));
      }
    }
}

TEST_CASE("gpipe: all forwards before any backward on every device") {
  const Schedule s = gpipe(3, 5);
  for (const auto& list : s.actions) {
    for (size_t k = 0; k < 5; ++k) CHECK(list[k].type == ActionType::F);
    for (size_t k = 5; k < 10; ++k) CHECK(list[k].type == ActionType::B);
  }
}

TEST_CASE("zb-h1: device d defers d weight gradients past its steady state") {
  // Device D-1 runs F,I pairs for D-1 micro-batches before its first W; device 0 none.
  const int D = 4, M = 8;
  const Schedule s = zb_h1(D, M);
  for (int d = 0; d < D; ++d) {
    const auto& list = s.actions[static_cast<size_t>(d)];
    const auto first_w = std::find_if(list.begin(), list.end(),
                                      [](const Action& a) { return a.type == ActionType::W; });
    const int is_before = static_cast<int>(std::count_if(
        list.begin(), first_w, [](const Action& a) { return a.type == ActionType::I; }));
    CAPTURE(d);
    CHECK(is_before == d + 1);
  }
}

TEST_CASE("zb-h2: device d warms up with min(2(D - d) - 1, M) forwards, then I first") {
  for (int D = 1; D <= 6; ++D)
    for (int M = 1; M <= 16; ++M) {
      const Schedule s = zb_h2(D, M);
      for (int d = 0; d < D; ++d) {
        const auto& list = s.actions[static_cast<size_t>(d)];
        const auto first_i = std::find_if(list.begin(), list.end(),
                                          [](const Action& a) { return a.type == ActionType::I; });
        CAPTURE(D);
        CAPTURE(M);
        CAPTURE(d);
        REQUIRE(first_i != list.end());
        CHECK(first_i->microbatch == 0);
        CHECK(static_cast<int>(first_i - list.begin()) == std::min(2 * (D - d) - 1, M));
        CHECK(std::all_of(list.begin(), first_i,
                          [](const Action& a) { return a.type == ActionType::F; }));
      }
    }
  // S = 1: F I W per micro-batch (no one to wait for, one in flight).
  CHECK(to_text(zb_h2(1, 2)).find("device 0: 0F0 0I0 0W0 0F1 0I1 0W1") != std::string::npos);
}

TEST_CASE("interleaved: V == 1 is 1f1b; any M, in groups of D per chunk, a remainder spread") {
  CHECK(interleaved(3, 5, 1) == one_f_one_b(3, 5));
  CHECK(what_of([] { interleaved(2, 4, 0); }).find("at least 1 chunk") != std::string::npos);
  // The order of device 0's forwards: (micro-batch, chunk) groups through chunk 0, then chunk 1.
  auto forwards = [](const Schedule& s) {
    std::string out;
    for (const Action& a : s.actions[0])
      if (a.type == ActionType::F) out += a.str() + " ";
    return out;
  };
  // M % D == 0: Megatron's groups of D.
  CHECK(forwards(interleaved(2, 4, 2)) == "0F0 0F1 2F0 2F1 0F2 0F3 2F2 2F3 ");
  // M = 5, D = 2: groups of 3 and 2 (Megatron: 2, 2 and a short 1).
  CHECK(forwards(interleaved(2, 5, 2)) == "0F0 0F1 0F2 2F0 2F1 2F2 0F3 0F4 2F3 2F4 ");
  // M = 11, D = 3: 3 groups, remainder 2 spread: 4, 4, 3.
  CHECK(forwards(interleaved(3, 11, 2)) ==
        "0F0 0F1 0F2 0F3 3F0 3F1 3F2 3F3 0F4 0F5 0F6 0F7 3F4 3F5 3F6 3F7 0F8 0F9 0F10 3F8 3F9 "
        "3F10 ");
  // M < D: one group of M.
  CHECK(forwards(interleaved(4, 3, 3)) == "0F0 0F1 0F2 4F0 4F1 4F2 8F0 8F1 8F2 ");
  // Warm-up of device 0: 2(D - 1) + (V - 1) G forwards, G the largest group (4 for D = 3, M = 11).
  const Schedule s = interleaved(3, 11, 2);
  const auto& dev0 = s.actions[0];
  const auto first_b = std::find_if(dev0.begin(), dev0.end(),
                                    [](const Action& a) { return a.type == ActionType::B; });
  CHECK(static_cast<int>(first_b - dev0.begin()) == 2 * 2 + 4 + 1);  // + the steady phase's F
}

TEST_CASE("dualpipev: M < 2D is refused with the rule and what would fit") {
  for (int D = 1; D <= 6; ++D)
    for (int M = 1; M < 2 * D; ++M) {
      CAPTURE(D);
      CAPTURE(M);
      const std::string msg = what_of([&] { generate("dualpipev", D, M); });
      CHECK(msg.find("M >= 2D") != std::string::npos);
      CHECK(msg.find("micro-batches: " + std::to_string(M)) != std::string::npos);
      CHECK(msg.find("use " + std::to_string(2 * D) + " or more micro-batches") !=
            std::string::npos);
      CHECK((msg.find("at most " + std::to_string(M / 2) + " devices") != std::string::npos) ==
            (M >= 2));
    }
  const std::string fits = what_of([] { dualpipev(3, 5); });
  CHECK(fits.find("use 6 or more micro-batches, or at most 2 devices") != std::string::npos);
  CHECK(what_of([] { dualpipev(0, 4); }).find("devices: 0") != std::string::npos);
}

TEST_CASE("generate: names, and errors that list the valid ones") {
  CHECK(generate("gpipe", 2, 3) == gpipe(2, 3));
  CHECK(generate("1f1b", 3, 4) == one_f_one_b(3, 4));
  CHECK(generate("zb-h1", 3, 4) == zb_h1(3, 4));
  CHECK(generate("zb-h2", 3, 4) == zb_h2(3, 4));
  CHECK(generate("interleaved:2", 2, 4) == interleaved(2, 4, 2));
  CHECK(generate("interleaved:3", 2, 4).num_stages == 6);

  const std::string unknown = what_of([] { generate("pipedream", 2, 2); });
  CHECK(unknown.find("unknown schedule 'pipedream'") != std::string::npos);
  for (const std::string& name : schedule_names()) CHECK(unknown.find(name) != std::string::npos);
  CHECK(what_of([] { generate("interleaved:x", 2, 2); }).find("V must be an integer") !=
        std::string::npos);
  CHECK(what_of([] { generate("interleaved:", 2, 2); }).find("V must be") != std::string::npos);
  CHECK(what_of([] { generate("1f1b", 0, 2); }).find("devices: 0") != std::string::npos);
  CHECK(what_of([] { generate("gpipe", 2, 0); }).find("micro-batches: 0") != std::string::npos);
  CHECK(what_of([] { zb_h1(-1, 2); }) != "(no exception)");
  CHECK(what_of([] { zb_h2(2, 0); }).find("micro-batches: 0") != std::string::npos);
}

TEST_CASE(
    "forward_only: every placement of the sweep, lowered, validates as forward-only and runs") {
  for (const auto& g : test::sweep_schedules()) {
    CAPTURE(g.label());
    const Schedule& train = g.schedule;
    for (int M : {1, 3, 7}) {
      const Schedule eval = forward_only(train.stage_device, train.num_devices, M);
      ValidateOptions opt;
      opt.forward_only = true;
      const Validation compute = validate(eval, opt);
      CHECK_MESSAGE(compute.ok(), compute.report);
      const Validation lowered = validate(add_communication(eval), opt);
      CHECK_MESSAGE(lowered.ok(), lowered.report);
      // One F per (stage, micro-batch), in (micro-batch, stage) order on each device.
      size_t actions = 0;
      for (const auto& list : eval.actions) {
        actions += list.size();
        for (size_t i = 1; i < list.size(); ++i)
          CHECK(std::pair(list[i - 1].microbatch, list[i - 1].stage) <
                std::pair(list[i].microbatch, list[i].stage));
      }
      CHECK(actions == static_cast<size_t>(train.num_stages * M));
      // Not a training schedule: the validator without forward_only asks for the backward.
      CHECK_FALSE(validate(eval).ok());
    }
  }
}

TEST_CASE("forward_only: the validator refuses a backward, a missing F, and a bad placement") {
  Schedule s = forward_only({0, 1}, 2, 2);
  ValidateOptions opt;
  opt.forward_only = true;
  Schedule with_backward = s;
  with_backward.actions[1].push_back({1, ActionType::B, 0});
  CHECK(validate(with_backward, opt).report.find("1B0 in a forward-only schedule") !=
        std::string::npos);
  Schedule missing = s;
  missing.actions[0].pop_back();
  CHECK(validate(missing, opt).report.find("stage 0 has no 0F1") != std::string::npos);
  CHECK_THROWS_AS(forward_only({0, 2}, 2, 2), std::invalid_argument);
  CHECK_THROWS_AS(forward_only({0, 1}, 2, 0), std::invalid_argument);
}
