#pragma once
// An action with the time it ran (or is predicted to run), in microseconds from the step's start.
#include "schedule/action.h"

namespace pt::sched {

struct TimedAction {
  Action action;
  double start_us = 0, end_us = 0;
};

}  // namespace pt::sched
