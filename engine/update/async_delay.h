#pragma once
// How many steps old the weights are that a stage's micro-batches compute with under
// --update async (--async-delay). The schedule is the same either way
// (schedule/one_f_one_b_async.cpp); only the weight version each stage binds differs.
//
// uniform: every stage computes step t with W(t - 1), PipeDream-2BW's
//   W(t + 1) = W(t) - lr * update(g(W(t - 1))); two weight versions on every stage.
// per_stage: the least delay the window's lists allow each stage (sched::least_weight_delay,
//   schedule/weight_delay.h). In 1F1B the last stage runs a micro-batch's backward right after
//   its forward, so its UPDATE of step t - 1 has run before step t's first forward: it computes
//   with W(t) and keeps one version. Every other stage has started step t before step t - 1's
//   last backward and computes with W(t - 1), as in 2BW. The gradient of step t is then taken at
//   (W_0..W_{S-2} of t - 1, W_{S-1} of t), as PipeDream's weight stashing does per stage.
//   Measured (docs/update-strategies.md): less accuracy lost than uniform on
//   Fashion-MNIST with 2 stages, and half the second-version memory.
// per_microbatch: the least delay the lists allow each micro-batch (sched::
//   least_microbatch_delays): on stage s only the first S - 1 - s micro-batches of step t start
//   before the stage's UPDATE of step t - 1 and compute with W(t - 1); the others with W(t). The
//   gradient of step t then mixes the two versions on those stages, as PipeDream's weight
//   stashing does per micro-batch; the same two versions are held as with per_stage. The
//   default: on Fashion-MNIST (S = 2, M = 4, ten seeds) as accurate as the synchronous
//   pipeline, where per_stage loses 0.66 points (docs/update-strategies.md).
#include <string_view>

namespace pt {

enum class AsyncDelay {
  uniform,
  per_stage,
  per_microbatch,
};

// The flag's spelling: "uniform", "per-stage" or "per-microbatch".
constexpr std::string_view async_delay_name(AsyncDelay d) {
  switch (d) {
    case AsyncDelay::uniform: return "uniform";
    case AsyncDelay::per_stage: return "per-stage";
    case AsyncDelay::per_microbatch: return "per-microbatch";
  }
  return "?";
}

}  // namespace pt
