// PipelineTrainer's evaluation: a forward-only schedule with one micro-batch per chunk, lowered
// by the same pass as training and run by the same executor (pipeline_trainer.cpp runs it).
#include <algorithm>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/pipeline/pipeline_trainer.h"
#include "schedule/generators.h"
#include "schedule/lowering.h"
#include "schedule/validate.h"

namespace pt {

EvalStats PipelineTrainer::evaluate(const Tensor& inputs, const Tensor& targets, int64_t chunk) {
  const int64_t n = inputs.shape()[0];
  const EvalShare share = evaluate_rows(inputs, targets, 0, n, n, chunk);
  EvalStats out;
  out.samples = n;
  out.loss = share.loss;
  out.accuracy =
      share.correct < 0 ? -1.0 : static_cast<double>(share.correct) / static_cast<double>(n);
  return out;
}

// Evaluation is a forward-only schedule with one micro-batch per chunk, lowered by the same pass
// as training and run by the same executor.
PipelineTrainer::EvalShare PipelineTrainer::evaluate_rows(const Tensor& inputs,
                                                          const Tensor& targets, int64_t first_row,
                                                          int64_t row_count, int64_t divisor,
                                                          int64_t chunk) {
  if (chunk < 1)
    throw UsageError(fmt::format("the evaluation chunk is {} rows; it must be >= 1", chunk));
  EvalShare out;
  if (row_count < 1) return out;
  ScheduleRun run(devices_.size());
  run.inputs = inputs;
  run.targets = targets;
  run.loss_divisor = divisor;
  for (int64_t first = first_row; first < first_row + row_count; first += chunk) {
    run.mb_first.push_back(first);
    run.mb_size.push_back(std::min(chunk, first_row + row_count - first));
  }
  run.info = StepInfo{config_.trainer.seed, step_, 0, false};
  const sched::Schedule& sc = config_.schedule;
  const sched::Schedule schedule = sched::add_communication(
      sched::forward_only(sc.stage_device, sc.num_devices, static_cast<int>(run.mb_size.size())));
  sched::ValidateOptions check;
  check.forward_only = true;
  sched::require_valid(schedule, check);
  record_action_lists(schedule, FlightList::evaluation);
  run_schedule(schedule, run, /*training=*/false, nullptr);
  if (!holds_last_stage()) return out;
  const int last = layout_.stages.back().device;
  out.loss = run.loss[static_cast<size_t>(last)];
  out.correct = run.correct[static_cast<size_t>(last)];
  return out;
}

}  // namespace pt
