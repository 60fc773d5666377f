// ActionIndex (schedule/dependencies.h): a dense table for the actions inside the schedule's
// range, a map for the rest, and no table at all for a header that claims far more stages or
// micro-batches than its lists hold (a fuzzed file must not allocate terabytes).
#include <doctest/doctest.h>

#include "schedule/dependencies.h"
#include "schedule/generators.h"
#include "schedule/lowering.h"
#include "schedule/validate.h"

using namespace pt::sched;

TEST_CASE("action index: every action of a lowered schedule found where it is, first wins") {
  Schedule s = add_grad_reduction(add_communication(zb_h1(3, 5)));
  s.actions[1].push_back({1, ActionType::F, 9});   // beyond M: the map
  s.actions[2].push_back({2, ActionType::F, -7});  // below -1: the map
  s.actions[0].push_back({0, ActionType::F, 0});   // a duplicate: the first occurrence wins
  const ActionIndex index(s);
  for (size_t d = 0; d < s.actions.size(); ++d)
    for (size_t i = 0; i + 1 < s.actions[d].size() || (d != 0 && i < s.actions[d].size()); ++i) {
      const auto slot = index.find(s.actions[d][i]);
      REQUIRE(slot.has_value());
      CHECK(*slot == Slot{static_cast<int>(d), static_cast<int>(i)});
    }
  CHECK(index.find({0, ActionType::F, 0}) == Slot{0, 0});
  CHECK_FALSE(index.find({1, ActionType::F, 8}).has_value());
  CHECK_FALSE(index.find({5, ActionType::F, 0}).has_value());  // no such stage
  CHECK_FALSE(index.find({0, ActionType::UPDATE, 0}).has_value());
}

TEST_CASE("action index: a header claiming 2^30 stages and micro-batches allocates nothing big") {
  Schedule s = one_f_one_b(2, 2);
  s.num_stages = 1 << 30;
  s.microbatches = 1 << 30;
  const ActionIndex index(s);  // would be ~10^19 slots as a dense table
  CHECK(index.find(s.actions[1][0]) == Slot{1, 0});
  CHECK_FALSE(validate(s).ok());  // and the validator reports the header, without running out
}
