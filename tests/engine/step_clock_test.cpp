// StepClock: the recent full-size steps' median wall time, what --plan auto's prediction is
// compared with.
#include <doctest/doctest.h>

#include "engine/report/step_clock.h"

using namespace pt;

TEST_CASE("step clock: the median of recent full-size steps, the first step excluded") {
  StepClock c;
  CHECK(c.median_seconds() == 0);  // nothing yet
  c.record(0, 64, 9.0);            // the first step (warm-up) does not count
  CHECK(c.median_seconds() == 0);
  c.record(1, 64, 3.0);
  c.record(2, 64, 1.0);
  c.record(3, 64, 2.0);
  CHECK(c.median_seconds() == 2.0);
  c.record(4, 16, 100.0);  // an epoch's smaller remainder is not a full step
  CHECK(c.median_seconds() == 2.0);
  c.record(5, 128, 7.0);  // a larger batch: the earlier ones were not full steps
  CHECK(c.median_seconds() == 7.0);
  // Only the last 32 count: 40 steps of 5 s, then 33 of 1 s.
  StepClock ring;
  for (int s = 1; s <= 40; ++s) ring.record(s, 8, 5.0);
  CHECK(ring.median_seconds() == 5.0);
  for (int s = 41; s <= 56; ++s) ring.record(s, 8, 1.0);
  CHECK(ring.median_seconds() == 3.0);  // 16 of 1 s, 16 of 5 s: the two middle ones' mean
  ring.record(57, 8, 1.0);
  CHECK(ring.median_seconds() == 1.0);  // 17 of 1 s among the last 32
  for (int s = 58; s <= 90; ++s) ring.record(s, 8, 1.0);
  CHECK(ring.median_seconds() == 1.0);
}
