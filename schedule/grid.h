#pragma once
// The device × step grid that every schedule error prints: one row per device, its actions in
// order, columns aligned by step. A marked action is drawn in brackets and its row ends with
// "<-- ERROR HERE", so a reader sees the failing action in the context of all devices:
//
//   step       0    1      2    3
//   device 0:  0F0  0F1    0B0  0B1
//   device 1:  1F0  [1B1]  1F1  1B0  <-- ERROR HERE (step 1, 1B1): runs before 1F1 (step 2)
#include <string>
#include <vector>

#include "schedule/dependencies.h"

namespace pt::sched {

struct GridMark {
  Slot at;           // the marked action; at.index == -1 (or past the end) marks the row only
  std::string note;  // what is wrong there
};

std::string render_grid(const Schedule& schedule, const std::vector<GridMark>& marks = {});

}  // namespace pt::sched
