#include "examples/common/parallel_flags.h"

#include "engine/core/error.h"
#include "examples/common/integer_text.h"

namespace pt::examples {

void add_parallel_flags(CLI::App& app, ParallelFlags& f) {
  app.add_option("--devices", f.devices,
                 "one device per stage and replica: cpu:0,cpu:1 | cpu:0..3 | auto")
      ->capture_default_str();
  app.add_option("--precision", f.precision,
                 "GEMM/conv arithmetic on CUDA devices: fp32 | tf32 | bf16 (fp32 weights and "
                 "optimizer state)")
      ->capture_default_str();
  app.add_option("--threads", f.threads, "threads per device (0: cores / devices)")
      ->check(kIntText);
  app.add_option("--stages", f.stages, "pipeline stages S (one device each)")
      ->capture_default_str()
      ->check(kIntText);
  app.add_option("--dp", f.dp,
                 "data-parallel replicas R of the pipeline (R x S devices or processes)")
      ->capture_default_str()
      ->check(kIntText);
  app.add_option("--microbatches", f.microbatches,
                 "split each replica's batch into M micro-batches")
      ->capture_default_str()
      ->check(kIntText);
  app.add_option("--schedule", f.schedule, "gpipe | 1f1b | interleaved:V | zb-h1 | file:PATH")
      ->capture_default_str();
  app.add_option("--partition", f.partition, "uniform | params | time | memory | layout:a,b,...")
      ->capture_default_str();
  app.add_option("--costs", f.costs, "layer costs for the partitioner: estimate | profile")
      ->capture_default_str();
  app.add_option("--mem-cap", f.mem_cap_mib, "memory cap per device in MiB (--partition memory)");
  app.add_option("--recompute", f.recompute, "never | always | except_last | every:K")
      ->capture_default_str();
  app.add_option("--timeout", f.timeout, "seconds any wait for a peer may take")
      ->capture_default_str();
  app.add_option("--bucket-mb", f.bucket_mb,
                 "gradients are all-reduced in buckets of this many MiB")
      ->capture_default_str();
  app.add_flag("--plan-only", f.plan_only,
               "print partition, schedule and predicted step time, then exit");
  app.add_option("--trace", f.trace, "write a Chrome/Perfetto trace of the last step");
  app.add_option("--timeline", f.timeline, "write an SVG timeline of the last step");
  app.add_option("--flight-recorder", f.flight_recorder,
                 "folder for each process's record of its last actions and communication calls "
                 "(rank-N.json), written on a timeout, an error or SIGUSR1; read it with "
                 "pipetrain-hang DIR");
  app.add_option("--update", f.update,
                 "sync: every step flushes the pipeline | async: PipeDream-2BW, no flush between "
                 "steps, step t's gradient (taken at the weights of t-1) updates each stage on its "
                 "own")
      ->capture_default_str();
  app.add_option("--async-window", f.async_window,
                 "--update async: steps per schedule run (the bubble is paid once per window)")
      ->capture_default_str()
      ->check(kIntText);
}

TrainingOptions training_options(const ParallelFlags& f) {
  TrainingOptions o;
  o.devices = f.devices;
  o.precision = parse_precision(f.precision);
  o.threads = f.threads;
  o.stages = f.stages;
  o.dp = f.dp;
  o.microbatches = f.microbatches;
  o.schedule = ScheduleChoice::parse(f.schedule);
  o.partition = PartitionMethod::parse(f.partition);
  o.costs = CostSource::parse(f.costs);
  o.recompute = RecomputePolicy::parse(f.recompute);
  o.mem_cap_mib = f.mem_cap_mib;
  o.timeout_s = f.timeout;
  o.bucket_mib = f.bucket_mb;
  o.plan_only = f.plan_only;
  o.trace = f.trace;
  o.timeline = f.timeline;
  if (f.update != "sync" && f.update != "async")
    throw UsageError("--update " + f.update +
                     " is not a mode: use --update sync or --update async");
  o.async_update = f.update == "async";
  o.async_window = f.async_window;
  return o;
}

}  // namespace pt::examples
