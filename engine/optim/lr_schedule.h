#pragma once
// Learning-rate schedules: an optional linear warm-up, then constant or cosine decay.
//   warm-up (step < W):  lr = base * (step + 1) / W
//   constant:            lr = base
//   cosine:              lr = min + (base - min) * (1 + cos(pi * t)) / 2,  t = (step - W) / (T - W)
// `step` counts optimizer steps from 0; T = total steps of the run.
#include <cstdint>
#include <string>

namespace pt {

struct LrSchedule {
  enum class Kind { constant, cosine };
  Kind kind = Kind::constant;
  float base_lr = 0.05f;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;  // needed by cosine
  float min_lr = 0.f;

  float at(int64_t step) const;
  // Parses "constant" or "cosine"; throws UsageError otherwise.
  static Kind parse_kind(const std::string& text);
};

}  // namespace pt
