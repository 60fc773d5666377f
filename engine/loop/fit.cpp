#include "engine/loop/fit.h"
#include "engine/loop/step_record.h"

#include <optional>
#include <vector>

#include <fmt/format.h>

#include "engine/checkpoint/checkpoint.h"
#include "engine/core/error.h"
#include "engine/data/batching.h"
#include "engine/io/output_path.h"
#include "engine/process/preemption.h"
#include "engine/report/metrics.h"
#include "engine/report/progress.h"

namespace pt {

namespace {

EvalStats evaluate_dataset(TrainingEngine& trainer, const Dataset& data) {
  Shape in = data.sample_shape.with_batch(data.size());
  const Tensor x = Tensor::borrow(const_cast<float*>(data.inputs.data()), in);
  const Tensor y =
      Tensor::borrow(const_cast<int32_t*>(data.labels.data()), Shape{data.size()}, DType::i32);
  return trainer.evaluate(x, y);
}

TrainingState state_of(const TrainingEngine& trainer, const BatchIterator& it,
                       const FitOptions& options) {
  TrainingState s;
  s.step = trainer.step();
  s.epoch = it.position().epoch;
  s.batch_in_epoch = it.position().offset / options.batch;
  s.seed = trainer.seed();
  return s;
}

}  // namespace

int64_t planned_steps(const FitOptions& options, int64_t n) {
  if (options.steps > 0) return options.steps;
  return options.epochs * ((n + options.batch - 1) / options.batch);
}

FitResult fit(TrainingEngine& trainer, const Dataset& train, const Dataset* test,
              const FitOptions& options) {
  if (options.batch < 1 || options.batch > train.size())
    throw UsageError(fmt::format("--batch {} must be between 1 and the training set size {}",
                                 options.batch, train.size()));
  // Before any step: a path that cannot be written must not cost the whole run.
  if (!options.metrics.empty()) check_output_path(options.metrics, "--metrics");
  CheckpointOptions checkpoint_options = options.checkpoints;
  checkpoint_options.settings["batch"] = std::to_string(options.batch);
  checkpoint_options.settings["no-shuffle"] = options.shuffle ? "false" : "true";
  RunCheckpoints checkpoints(checkpoint_options,
                             options.checkpoint_world ? options.checkpoint_world : options.world);
  BatchIterator batches(train, BatchOptions{options.batch, options.shuffle, false, trainer.seed()});
  const int64_t total = planned_steps(options, train.size());

  int64_t resumed_at = -1;
  if (const std::optional<TrainingState> s = checkpoints.resume(trainer)) {
    batches.set_position({s->epoch, s->batch_in_epoch * options.batch});
    resumed_at = s->step;
    fmt::print("resumed from {} at step {} (epoch {}, batch {})\n",
               checkpoints.resumed_from().string(), s->step, s->epoch + 1, s->batch_in_epoch);
  }
  checkpoints.save_init(trainer, state_of(trainer, batches, options));

  MetricsWriter metrics =
      options.metrics.empty() ? MetricsWriter() : MetricsWriter(options.metrics, resumed_at);
  std::optional<PreemptionWatch> preemption;
  if (options.watch_signals) preemption.emplace();
  FitResult result;
  Progress progress("train", total, options.log_every);
  double loss_sum = 0;
  int64_t loss_count = 0;
  // Once a stop signal is agreed: the step to train to before the final save. Processes that do
  // not train in lockstep (asynchronous parameter-server workers) stop at different steps; those
  // behind catch up, without evaluations or saves, so the checkpoint holds equal steps from each.
  std::optional<int64_t> stop_at;
  while (trainer.step() < total && !(stop_at && trainer.step() >= *stop_at)) {
    const int64_t epoch = batches.position().epoch;
    // Up to window() batches (an asynchronous pipeline runs them as one schedule), never across
    // the end of the run or of an epoch (evaluation) or a checkpoint: those see a drained pipeline.
    const int64_t first = trainer.step();
    std::vector<Batch> window;
    for (;;) {
      window.push_back(batches.next());
      const int64_t after = first + static_cast<int64_t>(window.size());
      if (static_cast<int64_t>(window.size()) >= trainer.window() || after >= total ||
          batches.position().epoch != epoch || checkpoints.saves_after(after) ||
          (stop_at && after >= *stop_at))
        break;
    }
    std::vector<HostBatch> host;
    for (Batch& batch : window)
      host.push_back({Tensor::borrow(batch.inputs.data(), batch.input_shape),
                      Tensor::borrow(batch.labels.data(), Shape{batch.size}, DType::i32)});

    const TimedSteps window_stats = train_timed(trainer, host);
    result.seconds += window_stats.seconds;
    for (size_t k = 0; k < window_stats.stats.size(); ++k) {
      const StepStats& st = window_stats.stats[k];
      const int64_t step_done = first + static_cast<int64_t>(k) + 1;
      ++result.steps;
      result.last_loss = st.loss;
      loss_sum += st.loss;
      ++loss_count;
      record_step(metrics, st, step_done, window_stats.step_seconds(), "samples_per_s",
                  static_cast<double>(st.samples), {{"epoch", epoch + 1}});
      progress.update(step_done, fmt::format("epoch {} loss {:.4f}", epoch + 1,
                                             loss_sum / static_cast<double>(loss_count)));
    }

    if (stop_at) continue;  // catching up
    const bool evaluates =
        batches.position().epoch != epoch && test && trainer.step() < total;  // an epoch ended
    // Where the processes meet anyway, they first agree whether one of them stops.
    const bool meets = evaluates || checkpoints.saves_after(trainer.step());
    if (meets && (stop_at = trainer.agree_on_stop(false))) continue;
    if (evaluates) {
      progress.finish();
      const EvalStats ev = evaluate_dataset(trainer, *test);
      fmt::print("epoch {}: train loss {:.4f}, test loss {:.4f}, test accuracy {:.2f}%\n",
                 epoch + 1, loss_sum / static_cast<double>(loss_count), ev.loss,
                 100.0 * ev.accuracy);
      metrics.write({{"event", std::string("eval")},
                     {"step", trainer.step()},
                     {"epoch", epoch + 1},
                     {"test_loss", ev.loss},
                     {"test_accuracy", ev.accuracy}});
      loss_sum = 0;
      loss_count = 0;
    }
    if (checkpoints.saves_after(trainer.step())) progress.finish();  // the message on its own line
    checkpoints.after_step(trainer, [&] { return state_of(trainer, batches, options); });
    if (preemption && trainer.step() < total &&
        preemption->requested(options.world, trainer.peer_asked_to_stop())) {
      result.preempted = preemption->which();
      stop_at = trainer.agree_on_stop(true);
    }
  }
  // The end meets a process that stopped before it.
  if (!stop_at) stop_at = trainer.agree_on_stop(false);
  if (stop_at && trainer.step() < total && !result.preempted)
    result.preempted = "a stop signal in another process";
  if (trainer.step() >= total) result.preempted = nullptr;  // caught up to the end: finished
  progress.finish();
  if (result.seconds > 0)
    result.samples_per_second = static_cast<double>(result.steps * options.batch) / result.seconds;
  if (result.preempted)
    fmt::print("stopping after step {} of {}: {} received{}\n", trainer.step(), total,
               result.preempted,
               options.checkpoints.save.empty() ? " (no --save given: nothing is written)" : "");
  checkpoints.at_end(trainer, state_of(trainer, batches, options));
  if (test && !result.preempted) {
    result.test = evaluate_dataset(trainer, *test);
    metrics.write({{"event", std::string("eval")},
                   {"step", trainer.step()},
                   {"test_loss", result.test.loss},
                   {"test_accuracy", result.test.accuracy}});
  }
  return result;
}

}  // namespace pt
