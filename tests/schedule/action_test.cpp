// Action: the canonical text form prints and parses, strictly.
#include <doctest/doctest.h>

#include "schedule/action.h"

using namespace pt::sched;

TEST_CASE("action text round trip for every type") {
  const ActionType types[] = {ActionType::F,      ActionType::B,      ActionType::I,
                              ActionType::W,      ActionType::SEND_F, ActionType::RECV_F,
                              ActionType::SEND_B, ActionType::RECV_B, ActionType::REDUCE_GRAD};
  for (ActionType t : types)
    for (int stage : {0, 3, 12})
      for (int m : {0, 7, 123}) {
        const Action a{stage, t, has_microbatch(t) ? m : -1};
        const auto back = parse_action(a.str());
        REQUIRE_MESSAGE(back.has_value(), a.str());
        CHECK(*back == a);
      }
}

TEST_CASE("action canonical spellings") {
  CHECK(Action{2, ActionType::F, 0}.str() == "2F0");
  CHECK(Action{10, ActionType::SEND_F, 12}.str() == "10SEND_F12");
  CHECK(Action{1, ActionType::RECV_B, 3}.str() == "1RECV_B3");
  CHECK(Action{4, ActionType::REDUCE_GRAD, -1}.str() == "4REDUCE_GRAD");
  CHECK(*parse_action("10SEND_F12") == Action{10, ActionType::SEND_F, 12});
  CHECK(*parse_action("0REDUCE_GRAD") == Action{0, ActionType::REDUCE_GRAD, -1});
  CHECK(*parse_action("3W2") == Action{3, ActionType::W, 2});
}

TEST_CASE("action parse rejects anything but the canonical form") {
  for (const char* bad :
       {"",     "F0",   "2X0",           "2F",   "2STEP",         "0STEP",         "-1F0",
        "2F-1", "2F0x", "2F0 ",          " 2F0", "2f0",           "2SEND0",        "2SEND_F",
        "02F0", "2F00", "2REDUCE_GRAD0", "STEP", "99999999999F0", "2F99999999999", "2+F0",
        "2F+0", "2F0.5"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_action(bad).has_value());
  }
}

TEST_CASE("action type predicates") {
  CHECK(type_name(ActionType::SEND_B) == "SEND_B");
  CHECK(is_compute(ActionType::I));
  CHECK_FALSE(is_compute(ActionType::RECV_F));
  CHECK(is_communication(ActionType::RECV_F));
  CHECK_FALSE(is_communication(ActionType::REDUCE_GRAD));
  CHECK_FALSE(has_microbatch(ActionType::REDUCE_GRAD));
  CHECK(has_microbatch(ActionType::W));
}
