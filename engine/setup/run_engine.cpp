#include "engine/setup/run_engine.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/replicas/data_parallel_trainer.h"
#include "engine/replicas/ps_trainer.h"

namespace pt {

PipelineConfig pipeline_config(const TrainingRun& run, const TrainerConfig& trainer) {
  const TrainingOptions& opt = run.options;
  PipelineConfig pc;
  pc.trainer = trainer;
  pc.schedule = run.plan->schedule;
  pc.layers_per_stage = run.plan->partition.layout();
  pc.recompute = opt.recompute;
  pc.timeout_s = opt.timeout_s;
  // Two timing events per action, read once per step (Executor::run): no synchronisation per
  // action, so a GPU's streams still overlap; on the CPU within the noise of a step
  // (pipetrain-bench-flight-recorder, step_trace_train). The bubble report needs it.
  pc.record_trace = true;
  pc.parallel.bucket_bytes = static_cast<size_t>(opt.bucket_mib * 1024 * 1024);
  pc.async_update = opt.async_update;
  pc.async_window = opt.async_window;
  pc.async_delay = opt.async_delay;
  pc.parallel.shard_optimizer = opt.shard_optimizer;
  pc.parallel.shard_full = opt.shard_full;
  pc.parallel.shard_unit_layers = opt.shard_unit;
  pc.parallel.reshard_after_forward = opt.resolved_reshard_after_forward();
  pc.parallel.shard_group_size = opt.shard_group;
  pc.parallel.shard_prefetch = opt.shard_prefetch;
  pc.parallel.shard_reduce_every_microbatch = opt.resolved_reduce_every_microbatch();
  pc.parallel.sequence_parallel = opt.tp > 1 && opt.sequence_parallel;
  pc.parallel.tensor_parallel_overlap = opt.tp_overlap;
  pc.parallel.tensor_parallel_overlap_forwards = opt.tp_overlap && opt.tp_overlap_forwards;
  pc.parallel.slow_replica = opt.slow_replica;
  pc.parallel.slow_factor = opt.slow_factor;
  return pc;
}

void build_pipeline_engine(TrainingRun& s, const PipelineConfig& pc, Model& model,
                           const std::function<Model()>& make_model, Communicator* world) {
  const TrainingOptions& opt = s.options;
  if (opt.ps > 0) {
    const PsOptions ps{opt.ps, std::max(0, opt.staleness)};
    // Asynchronous servers take one optimizer step per push: R per training step (checkpoints).
    if (ps.staleness > 0) s.layout["optimizer_steps_per_step"] = std::to_string(opt.dp);
    if (opt.print)
      fmt::print(
          "parameter server: {} server{}{}, {}\n", ps.servers, ps.servers == 1 ? "" : "s",
          world ? fmt::format(" (world ranks {}..{}; workers: ranks 0..{}{})", opt.dp * opt.stages,
                              opt.dp * opt.stages + ps.servers - 1, opt.dp * opt.stages - 1,
                              opt.stages > 1
                                  ? fmt::format(", replica r's stage s at r x {} + s", opt.stages)
                                  : std::string())
                : " (threads of this process)",
          ps.staleness == 0
              ? std::string("synchronous")
              : fmt::format("asynchronous, staleness <= {} global steps", ps.staleness));
    if (world) {
      PsProcess p =
          make_process_parameter_server(make_model, *s.backends[0], pc, *world, opt.dp, ps);
      s.serve = std::move(p.serve);
      s.server_stats = std::move(p.server_stats);
      s.workers = p.workers;
      s.lockstep = p.lockstep;
      if (p.engine) {
        s.pipeline = &p.engine->workers().replica(0);
        s.engine = std::move(p.engine);
      }
    } else {
      auto p = make_local_parameter_server(make_model, s.backends, pc, opt.dp, ps);
      s.pipeline = &p->workers().replica(0);
      s.engine = std::move(p);
    }
    s.timed = s.engine.get();
    return;
  }
  if (world || opt.dp > 1 || opt.tp > 1) {
    auto dp =
        world ? make_process_data_parallel(make_model, *s.backends[0], pc, *world, opt.dp, opt.tp)
              : make_local_data_parallel(make_model, s.backends, pc, opt.dp, opt.tp);
    // Said once: their compute and memory are repeated on every tensor rank.
    if (opt.tp > 1 && opt.print && (!world || world->rank() == 0))
      fmt::print("tensor parallelism: {}\n",
                 dp->replicated_layers().empty()
                     ? std::string("every layer with parameters is split")
                     : fmt::format("whole on every tensor-parallel rank (no split declared): "
                                   "layer{} {}",
                                   dp->replicated_layers().size() == 1 ? "" : "s",
                                   fmt::join(dp->replicated_layers(), ", ")));
    s.pipeline = &dp->replica(0);
    s.engine = std::move(dp);
  } else {
    auto p = std::make_unique<PipelineTrainer>(model, s.backends, pc);
    s.pipeline = p.get();
    s.engine = std::move(p);
  }
  // Replica 0's devices here (under mpirun: this process's device).
  s.optimizer_state_bytes = s.pipeline->optimizer_state_bytes();
  s.unsharded_optimizer_state_bytes = s.pipeline->unsharded_optimizer_state_bytes();
  if (opt.print && opt.shard_optimizer)
    fmt::print(
        "optimizer state: {:.3f} MiB {} (1/{} of {:.3f} MiB unsharded)\n",
        static_cast<double>(s.optimizer_state_bytes) / (1 << 20),
        world ? "on this process's device" : fmt::format("per replica ({} device(s))", opt.stages),
        opt.dp, static_cast<double>(s.unsharded_optimizer_state_bytes) / (1 << 20));
  if (opt.async_update)
    s.description += fmt::format(
        ", async updates (PipeDream-2BW, window {} steps, delay {}, second weight version {:.2f} "
        "MiB{})",
        opt.async_window, async_delay_name(opt.async_delay),
        static_cast<double>(s.pipeline->weight_stash_bytes()) / (1 << 20),
        world ? " in this process" : "");
  // Measured, not assumed (docs/update-strategies.md): under a delay, heavy-ball
  // momentum lost 3-5 points of Fashion-MNIST accuracy after 3 epochs; Nesterov's form, which for
  // a delay of one step is the spike compensation of Kosson et al. 2021, recovers most of it.
  const OptimizerConfig& o = pc.trainer.optimizer;
  if (opt.print && (opt.async_update || opt.staleness > 0) && o.kind == "sgd" && o.momentum > 0 &&
      !o.nesterov && (!world || world->rank() == 0))
    fmt::print(
        "note: delayed updates with heavy-ball momentum train slower (Fashion-MNIST, 3 epochs: "
        "3-5 points below synchronous); --nesterov (with --update async: --async-momentum "
        "lookahead, the default) compensates a one-step delay "
        "(docs/update-strategies.md)\n");
  s.timed = s.engine.get();
}

}  // namespace pt
