// The validator catches what would break at run time, and says where on the device × step grid.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "schedule/dry_run.h"
#include "schedule/generators.h"
#include "schedule/grid.h"
#include "schedule/lowering.h"
#include "schedule/text_format.h"
#include "schedule/validate.h"

using namespace pt::sched;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The report is invalid, names `part` in an error, and marks the grid.
void check_caught(const Validation& v, const std::string& part) {
  CHECK_FALSE(v.ok());
  bool found = false;
  for (const std::string& e : v.errors) found = found || contains(e, part);
  CHECK_MESSAGE(found, "no error mentions '" << part << "':\n" << v.report);
  CHECK_MESSAGE(contains(v.report, "<-- ERROR HERE"), v.report);
  CHECK_MESSAGE(contains(v.report, "device 0:"), v.report);  // the grid is there
}

void erase(std::vector<Action>& list, const Action& a) {
  const auto it = std::find(list.begin(), list.end(), a);
  REQUIRE(it != list.end());
  list.erase(it);
}

// The line of the report's grid for `device`.
std::string grid_row(const std::string& report, int device) {
  const std::string label = "\ndevice " + std::to_string(device) + ":";
  const size_t at = report.find(label);
  if (at == std::string::npos) return "";
  return report.substr(at + 1, report.find('\n', at + 1) - at - 1);
}

}  // namespace

TEST_CASE("validator accepts the generators' output") {
  CHECK(validate(one_f_one_b(3, 4)).ok());
  CHECK(validate(add_communication(zb_h1(3, 4))).ok());
  CHECK(validate(gpipe(1, 1)).ok());
}

TEST_CASE("validator catches a missing action") {
  Schedule s = one_f_one_b(2, 3);
  erase(s.actions[1], {1, ActionType::B, 1});
  const Validation v = validate(s);
  check_caught(v, "1F1 has no backward");
  CHECK(contains(grid_row(v.report, 1), "[1F1]"));  // marked where it is missing

  Schedule no_f = one_f_one_b(2, 3);
  erase(no_f.actions[0], {0, ActionType::F, 2});
  check_caught(validate(no_f), "but no 0F2");

  Schedule nothing = one_f_one_b(2, 3);
  erase(nothing.actions[1], {1, ActionType::F, 2});
  erase(nothing.actions[1], {1, ActionType::B, 2});
  check_caught(validate(nothing), "stage 1 has no action for micro-batch 2");

  Schedule no_w = zb_h1(2, 2);
  erase(no_w.actions[0], {0, ActionType::W, 1});
  check_caught(validate(no_w), "0I1 has no 0W1");
}

TEST_CASE("validator catches an extra action") {
  Schedule s = one_f_one_b(2, 3);
  s.actions[0].push_back({0, ActionType::F, 0});
  check_caught(validate(s), "0F0 appears more than once");

  Schedule mixed = zb_h1(2, 2);
  mixed.actions[1].push_back({1, ActionType::B, 0});
  check_caught(validate(mixed), "has both B and I/W");

  Schedule out_of_range = one_f_one_b(2, 3);
  out_of_range.actions[0].push_back({0, ActionType::F, 3});
  check_caught(validate(out_of_range), "names micro-batch 3, outside 0..2");

  Schedule wrong_device = one_f_one_b(2, 3);
  wrong_device.actions[0].insert(wrong_device.actions[0].begin(), {1, ActionType::F, 0});
  erase(wrong_device.actions[1], {1, ActionType::F, 0});
  check_caught(validate(wrong_device), "but stage 1 is placed on device 1");
}

TEST_CASE("validator catches B before F, and W before I") {
  Schedule s = gpipe(2, 2);
  std::swap(s.actions[1][0], s.actions[1][2]);  // 1B0 1F1 1F0 1B1
  const Validation v = validate(s);
  check_caught(v, "1B0 runs before 1F0 (step 2)");
  CHECK(contains(grid_row(v.report, 1), "[1B0]"));
  CHECK(contains(grid_row(v.report, 1), "<-- ERROR HERE (step 0, 1B0)"));

  Schedule z = zb_h1(2, 2);
  auto& list = z.actions[0];
  const auto i = std::find(list.begin(), list.end(), Action{0, ActionType::I, 0});
  const auto w = std::find(list.begin(), list.end(), Action{0, ActionType::W, 0});
  std::iter_swap(i, w);
  check_caught(validate(z), "0W0 runs before 0I0");
}

TEST_CASE("validator catches communication errors in lowered schedules") {
  const Schedule good = add_communication(one_f_one_b(2, 2));
  REQUIRE(validate(good, {Form::Lowered, true}).ok());

  Schedule no_recv = good;
  erase(no_recv.actions[1], {1, ActionType::RECV_F, 1});
  const Validation v = validate(no_recv, {Form::Lowered, true});
  check_caught(v, "0SEND_F1 has no matching 1RECV_F1 on device 1");
  CHECK(contains(grid_row(v.report, 0), "[0SEND_F1]"));

  Schedule no_pair = good;
  erase(no_pair.actions[0], {0, ActionType::SEND_F, 0});
  erase(no_pair.actions[1], {1, ActionType::RECV_F, 0});
  check_caught(validate(no_pair, {Form::Lowered, true}),
               "but there is no 0SEND_F0 / 1RECV_F0 pair");

  Schedule late_recv = good;  // RECV_B after the B that needs it
  erase(late_recv.actions[0], {0, ActionType::RECV_B, 0});
  late_recv.actions[0].push_back({0, ActionType::RECV_B, 0});
  check_caught(validate(late_recv, {Form::Lowered, true}), "0RECV_B0 runs after 0B0");

  Schedule early_send = good;  // SEND_F before the F that produces it
  erase(early_send.actions[0], {0, ActionType::SEND_F, 1});
  early_send.actions[0].insert(early_send.actions[0].begin(), {0, ActionType::SEND_F, 1});
  check_caught(validate(early_send, {Form::Lowered, true}), "0SEND_F1 runs before 0F1");

  Schedule from_last = good;
  from_last.actions[1].push_back({1, ActionType::SEND_F, 0});
  check_caught(validate(from_last, {Form::Lowered, true}), "is the last stage");

  // A compute-only schedule must not hold communication; a lowered one must hold all of it.
  check_caught(validate(good, {Form::ComputeOnly, true}), "in a compute-only schedule");
  check_caught(validate(one_f_one_b(2, 2), {Form::Lowered, true}), "pair");
}

TEST_CASE("validator: no SEND/RECV between stages on one device") {
  Schedule s = empty_schedule(2, 3, 1);
  s.stage_device = {0, 0, 1};
  s.actions[0] = {{0, ActionType::F, 0},      {1, ActionType::F, 0}, {1, ActionType::SEND_F, 0},
                  {1, ActionType::RECV_B, 0}, {1, ActionType::B, 0}, {0, ActionType::B, 0}};
  s.actions[1] = {{2, ActionType::RECV_F, 0},
                  {2, ActionType::F, 0},
                  {2, ActionType::B, 0},
                  {2, ActionType::SEND_B, 0}};
  REQUIRE(validate(s, {Form::Lowered, true}).ok());
  s.actions[0].insert(s.actions[0].begin() + 1, {0, ActionType::SEND_F, 0});
  check_caught(validate(s, {Form::Lowered, true}), "a local hand-off needs no SEND/RECV");
}

TEST_CASE("validator catches a deadlock: two devices that each RECV first") {
  const Schedule s = parse_schedule_text(
      "pipeline devices=2 stages=2 microbatches=1\n"
      "device 0: 0RECV_B0 0F0 0SEND_F0 0B0\n"
      "device 1: 1RECV_F0 1F0 1B0 1SEND_B0\n");
  const Validation v = validate(s, {Form::Lowered, true});
  check_caught(v, "deadlock: no device can advance after 0 of 8 actions ran");
  check_caught(v,
               "device 0 is stuck at step 0 (0RECV_B0): it waits for 1SEND_B0 (device 1, step 3");
  check_caught(v,
               "device 1 is stuck at step 0 (1RECV_F0): it waits for 0SEND_F0 (device 0, step 2");
  CHECK(contains(grid_row(v.report, 0), "[0RECV_B0]"));
  CHECK(contains(grid_row(v.report, 1), "[1RECV_F0]"));
  CHECK(contains(grid_row(v.report, 1),
                 "<-- ERROR HERE (step 0, 1RECV_F0): stuck: waits for 0SEND_F0"));

  // The dry run alone says the same, and the deadlock check can be skipped.
  const DryRunResult run = dry_run(s, Form::Lowered);
  CHECK_FALSE(run.completed);
  REQUIRE(run.stuck.size() == 2);
  CHECK(run.stuck[0].at == Slot{0, 0});
  CHECK(run.stuck[0].waits_for == std::vector<Action>{{1, ActionType::SEND_B, 0}});
  CHECK(validate(s, {Form::Lowered, false}).ok());
}

TEST_CASE("validator catches a deadlock in a compute-only schedule") {
  // Device 1 wants micro-batch 1 first; device 0 will not send it before micro-batch 0's B.
  Schedule s = one_f_one_b(2, 2);
  s.actions[0] = {
      {0, ActionType::F, 0}, {0, ActionType::B, 0}, {0, ActionType::F, 1}, {0, ActionType::B, 1}};
  s.actions[1] = {
      {1, ActionType::F, 1}, {1, ActionType::F, 0}, {1, ActionType::B, 0}, {1, ActionType::B, 1}};
  const Validation v = validate(s);
  check_caught(v, "deadlock");
  check_caught(
      v, "device 1 is stuck at step 0 (1F1): it waits for 0F1 (device 0, step 2, not yet run)");
  check_caught(
      v, "device 0 is stuck at step 1 (0B0): it waits for 1B0 (device 1, step 2, not yet run)");
}

TEST_CASE("dry run alone: waits for same-device work and for actions in no list") {
  // B before its F on one device: the dry run waits for the F forever (the validator reports the
  // order first, but the dry run must not assume it).
  Schedule order = gpipe(1, 1);
  std::swap(order.actions[0][0], order.actions[0][1]);
  const DryRunResult r1 = dry_run(order, Form::ComputeOnly);
  CHECK_FALSE(r1.completed);
  REQUIRE(r1.stuck.size() == 1);
  CHECK(r1.stuck[0].waits_for == std::vector<Action>{{0, ActionType::F, 0}});

  // A lowered F whose RECV_F is in no list never runs.
  Schedule missing = add_communication(gpipe(2, 1));
  erase(missing.actions[1], {1, ActionType::RECV_F, 0});
  const DryRunResult r2 = dry_run(missing, Form::Lowered);
  CHECK_FALSE(r2.completed);
  REQUIRE(r2.stuck.size() == 2);  // device 1 at 1F0; device 0 at 0RECV_B0
  CHECK(r2.stuck[1].at == Slot{1, 0});
  CHECK(r2.stuck[1].explain(ActionIndex(missing)) == "waits for 1RECV_F0 (in no device's list)");
  CHECK(r2.executed == std::vector<int>{2, 0});
}

TEST_CASE("validator: shape errors and REDUCE_GRAD order") {
  Schedule s = one_f_one_b(2, 2);
  s.stage_device = {0, 2};
  CHECK(contains(validate(s).report, "stage 1 is placed on device 2, outside 0..1"));
  s = one_f_one_b(2, 2);
  s.actions.pop_back();
  CHECK(contains(validate(s).report, "there are 1 action lists for 2 devices"));

  Schedule early_reduce = one_f_one_b(2, 2);
  early_reduce.actions[0].insert(early_reduce.actions[0].begin() + 2,
                                 {0, ActionType::REDUCE_GRAD, -1});
  check_caught(validate(early_reduce), "0REDUCE_GRAD runs before 0B0");
  // The step is not an action: a schedule file that names one is refused by the parser.
  CHECK_FALSE(parse_action("1STEP").has_value());
}

TEST_CASE("render_grid aligns columns and marks rows") {
  const Schedule s = one_f_one_b(2, 2);
  const std::string grid = render_grid(s, {{Slot{1, 2}, "look here"}, {Slot{0, -1}, "row note"}});
  CHECK(grid ==
        "step       0    1    2      3\n"
        "device 0:  0F0  0F1  0B0    0B1  <-- ERROR HERE: row note\n"
        "device 1:  1F0  1B0  [1F1]  1B1  <-- ERROR HERE (step 2, 1F1): look here\n");
}
