#pragma once
// For the failure tests only: PIPETRAIN_FAULT="kill:RANK:STEP" or "stall:RANK:STEP" makes world
// rank RANK die (SIGKILL) or stop answering (sleep forever) when it starts optimizer step STEP,
// while its peers are inside that step waiting for it. The tests then check that every other
// rank gives up within --timeout, naming the missing rank. Unset: no effect.
#include <csignal>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/train/training_engine.h"
#include "examples/common/forwarding_engine.h"

namespace pt {

class FaultInjection final : public examples::ForwardingEngine {
 public:
  // Returns `inner` unchanged when PIPETRAIN_FAULT is unset or names another rank.
  static std::unique_ptr<TrainingEngine> wrap(std::unique_ptr<TrainingEngine> inner,
                                              int world_rank) {
    const char* spec = std::getenv("PIPETRAIN_FAULT");
    if (!spec || !*spec) return inner;
    const std::string s = spec;
    const auto a = s.find(':'), b = s.rfind(':');
    if (a == std::string::npos || a == b)
      throw UsageError(
          fmt::format("PIPETRAIN_FAULT='{}' is not kill:RANK:STEP or stall:RANK:STEP", s));
    const std::string kind = s.substr(0, a);
    if (kind != "kill" && kind != "stall")
      throw UsageError(
          fmt::format("PIPETRAIN_FAULT='{}' is not kill:RANK:STEP or stall:RANK:STEP", s));
    if (std::stoi(s.substr(a + 1, b - a - 1)) != world_rank) return inner;
    return std::make_unique<FaultInjection>(std::move(inner), kind == "kill",
                                            std::stoll(s.substr(b + 1)));
  }

  FaultInjection(std::unique_ptr<TrainingEngine> inner, bool kill, int64_t step)
      : ForwardingEngine(*inner), owned_(std::move(inner)), kill_(kill), step_(step) {}

  StepStats train_step(const Tensor& inputs, const Tensor& targets) override {
    if (inner().step() == step_) {
      std::fflush(stdout);
      if (kill_) std::raise(SIGKILL);
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    }
    return inner().train_step(inputs, targets);
  }

 private:
  std::unique_ptr<TrainingEngine> owned_;
  bool kill_;
  int64_t step_;
};

}  // namespace pt
