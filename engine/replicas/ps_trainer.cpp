#include "engine/replicas/ps_trainer.h"

#include <algorithm>
#include <cstdio>
#include <exception>

#include <fmt/format.h>

#include "engine/comm/in_process.h"
#include "engine/core/error.h"
#include "engine/process/preemption.h"

namespace pt {

namespace {

PsConfig ps_config(const PipelineConfig& config, int replicas, const PsOptions& ps) {
  if (ps.servers < 1)
    throw UsageError(fmt::format("--ps {} must be an integer between 1 and 1024", ps.servers));
  if (ps.staleness < 0)
    throw UsageError(fmt::format("--staleness {} must be >= 0 (0: synchronous)", ps.staleness));
  const int S = static_cast<int>(config.layers_per_stage.size());
  if (ps.staleness > 0 && ps.servers > 1 && config.trainer.clip_norm > 0.f)
    throw UsageError(fmt::format(
        "--clip with --staleness {} needs --ps 1: each push is clipped by the norm of all "
        "its gradients, and {} servers see pushes in different orders",
        ps.staleness, ps.servers));
  if (ps.staleness > 0 && S > 1 && config.trainer.clip_norm > 0.f)
    throw UsageError(fmt::format(
        "--clip with --staleness {} needs --stages 1: a push holds one stage's gradients, "
        "not all of them; drop --clip or use --staleness 0",
        ps.staleness));
  // Worker (r, s) is world rank r * S + s under mpirun, as data-parallel pipelines place them.
  bool one_per_device = config.schedule.num_devices == S;
  for (int s = 0; s < S && one_per_device; ++s)
    one_per_device = config.schedule.stage_device.at(static_cast<size_t>(s)) == s;
  if (!one_per_device)
    throw UsageError(fmt::format(
        "--ps needs stage s on device s (each stage's worker pushes its own layers) but the "
        "schedule puts {} stages on {} devices: use --schedule 1f1b or gpipe",
        S, config.schedule.num_devices));
  PsConfig c;
  c.servers = ps.servers;
  c.workers = replicas;
  c.stages = S;
  c.staleness = ps.staleness;
  c.optimizer = config.trainer.optimizer;
  c.lr = config.trainer.lr;
  c.clip_norm = config.trainer.clip_norm;
  return c;
}

// Replica r of R as parameter-server workers, one client per stage (no data-parallel group: the
// clients replace it). `devices` and `clients`: one per stage, null for stages held elsewhere.
std::unique_ptr<PipelineTrainer> make_worker(Model& model, std::vector<Backend*> devices,
                                             const PipelineConfig& config, int r, int replicas,
                                             std::vector<PsClient*> clients,
                                             Communicator* pipeline_group) {
  PipelineConfig rc = config;
  rc.parallel.replicas = replicas;
  rc.parallel.replica = r;
  rc.parallel.pipeline_group = pipeline_group;
  rc.parallel.data_parallel_groups.assign(devices.size(), nullptr);
  rc.parallel.parameter_servers = std::move(clients);
  return std::make_unique<PipelineTrainer>(model, std::move(devices), rc);
}

}  // namespace

ParameterServerTrainer::ParameterServerTrainer(std::unique_ptr<Parts> parts)
    : parts_(std::move(parts)) {}

ParameterServerTrainer::~ParameterServerTrainer() {
  try {
    finish();
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
  }
}

std::vector<PsServerStats> ParameterServerTrainer::finish() {
  if (!finished_) {
    finished_ = true;
    parts_->workers.reset();
    parts_->clients.clear();  // each sends STOP
    for (auto& t : parts_->servers) t.join();
    for (const PsServerStats& s : parts_->stats)
      if (s.pushes) fmt::print("{}\n", s.str(parts_->replicas));
    for (auto& e : parts_->errors)
      if (e) std::rethrow_exception(e);
  }
  return parts_->stats;
}

std::optional<int64_t> ParameterServerTrainer::agree_on_stop(bool stopping) {
  // Told first, so that the others learn it from their next reply and come to meet this one.
  if (stopping)
    for (auto& c : parts_->clients) c->announce_stop();
  if (!parts_->asynchronous || !parts_->workers_group)  // the workers are in lockstep
    return TrainingEngine::agree_on_stop(stopping);
  // Paused while it waits here: the staleness bound must not hold back a worker that is behind
  // (and has yet to come here) for this one, which computes nothing meanwhile.
  for (auto& c : parts_->clients) c->pause();
  // {anyone stopping, the furthest step}, as a sum of the flags and a sum of one-hot steps (the
  // communicators reduce by sum): each worker writes its step into its own slot.
  Communicator& workers = *parts_->workers_group;
  std::vector<int64_t> v(static_cast<size_t>(workers.size()) + 1, 0);
  v[0] = stopping ? 1 : 0;
  v[static_cast<size_t>(workers.rank()) + 1] = step();
  workers.all_reduce(v.data(), static_cast<int64_t>(v.size()), ElemType::i64, ReduceOp::sum,
                     "the workers agreeing on a stop (an evaluation, a save or the end)");
  if (v[0] == 0) return std::nullopt;
  if (!stopping)  // its STOP says so too (the server's exit code)
    for (auto& c : parts_->clients) c->announce_stop();
  return *std::max_element(v.begin() + 1, v.end());
}

std::vector<StageState> ParameterServerTrainer::stages_to_save() {
  // Asynchronous workers of several processes reach a save's step at different times: they meet
  // first, so that the servers have applied every worker's pushes up to this step (R * step)
  // when they answer. (Synchronous: every push of the step was applied before any worker got
  // its reply.)
  if (parts_->asynchronous && parts_->workers_group) {
    // Paused first: a worker still catching up must not be held back by the staleness bound
    // for this one, which computes nothing until the save is done.
    for (auto& c : parts_->clients) c->pause();
    parts_->workers_group->barrier("the workers meeting before a save");
  }
  // Every client asks before any waits: a synchronous server answers once all its workers
  // asked. Client i belongs to local replica i / clients_per_replica.
  std::vector<bool> asked;
  for (auto& c : parts_->clients) asked.push_back(c->request_state());
  for (size_t i = 0; i < parts_->clients.size(); ++i) {
    PipelineTrainer& replica =
        parts_->workers->replica(static_cast<int>(i) / parts_->clients_per_replica);
    // To receive the servers' state (dropped at the next pull); before the first step, a
    // loaded checkpoint's, or zeros.
    replica.make_full_optimizers();
    if (!asked[i]) continue;
    const StageState st = replica.stage_state(parts_->clients[i]->stage());
    if (!st.params || !st.optimizer)
      throw std::logic_error("a parameter-server worker holds its stage with an optimizer");
    parts_->clients[i]->receive_state(*st.params, *st.optimizer);
  }
  return parts_->workers->stages_to_save();
}

std::unique_ptr<ParameterServerTrainer> make_local_parameter_server(
    const std::function<Model()>& make_model, const std::vector<Backend*>& devices,
    const PipelineConfig& config, int replicas, const PsOptions& ps) {
  const PsConfig pc = ps_config(config, replicas, ps);
  const int K = ps.servers, R = replicas, S = pc.stages;
  if (static_cast<int>(devices.size()) != R * S)
    throw UsageError(
        fmt::format("--ps with --dp {} x --stages {} needs {} devices (one per worker), got {}", R,
                    S, R * S, devices.size()));
  auto parts = std::make_unique<ParameterServerTrainer::Parts>();
  parts->replicas = replicas;
  parts->clients_per_replica = S;
  Model shape_model = make_model();
  const std::vector<PsShard> shards = shard_by_layer(shape_model, K, config.layers_per_stage);
  auto group = make_in_process_group(R * S + K, config.timeout_s, "parameter server");
  std::vector<std::unique_ptr<Communicator>> servers_group;
  if (K > 1) servers_group = make_in_process_group(K, config.timeout_s, "parameter servers");
  parts->server_devices = open_devices(fmt::format("cpu:0..{}", K - 1), K, 1);
  DataParallelTrainer::Parts dp;
  for (int r = 0; r < R; ++r) {
    std::vector<PsClient*> clients;
    for (int s = 0; s < S; ++s) {
      const int w = r * S + s;
      parts->clients.push_back(
          std::make_unique<PsClient>(*group[static_cast<size_t>(w)], w, pc, shards));
      clients.push_back(parts->clients.back().get());
    }
    dp.models.push_back(std::make_unique<Model>(make_model()));
    dp.replicas.push_back(make_worker(*dp.models.back(),
                                      {devices.begin() + r * S, devices.begin() + (r + 1) * S},
                                      config, r, R, std::move(clients), nullptr));
  }
  for (auto& c : group) parts->communicators.push_back(std::move(c));
  for (auto& c : servers_group) parts->communicators.push_back(std::move(c));
  parts->workers = std::make_unique<DataParallelTrainer>(std::move(dp));
  // The server threads last: nothing after them throws (a joinable thread must not be dropped).
  parts->stats.resize(static_cast<size_t>(K));
  parts->errors.resize(static_cast<size_t>(K));
  for (int k = 0; k < K; ++k) {
    Communicator* ps_rank = parts->communicators[static_cast<size_t>(R * S + k)].get();
    Communicator* servers =
        K > 1 ? parts->communicators[static_cast<size_t>(R * S + K + k)].get() : nullptr;
    Backend* backend = parts->server_devices.backends[static_cast<size_t>(k)].get();
    ParameterServerTrainer::Parts* p = parts.get();
    const PsShard shard = shards[static_cast<size_t>(k)];
    parts->servers.emplace_back([=] {
      try {
        p->stats[static_cast<size_t>(k)] =
            run_parameter_server(*ps_rank, servers, pc, shard, *backend);
      } catch (...) {
        p->errors[static_cast<size_t>(k)] = std::current_exception();
      }
    });
  }
  return std::make_unique<ParameterServerTrainer>(std::move(parts));
}

PsProcess make_process_parameter_server(const std::function<Model()>& make_model, Backend& device,
                                        const PipelineConfig& config, Communicator& world,
                                        int replicas, const PsOptions& ps) {
  const PsConfig pc = ps_config(config, replicas, ps);
  const int K = ps.servers, R = replicas, S = pc.stages, W = R * S;
  if (world.size() != W + K)
    throw UsageError(fmt::format(
        "{} processes were started but --ps {} with --dp {} x --stages {} needs {} ({} server(s) "
        "+ {} worker(s)): start mpirun -np {}",
        world.size(), K, R, S, W + K, K, W, W + K));
  const int rank = world.rank();
  const bool server = rank >= W;
  // Both splits on every rank, in the same order (collective).
  auto side = world.split(server ? 1 : 0, rank, server ? "parameter servers" : "ps workers");
  Model shape_model = make_model();
  const std::vector<PsShard> shards = shard_by_layer(shape_model, K, config.layers_per_stage);
  PsProcess out;
  if (server) {
    const int k = rank - W;
    auto owned = std::make_shared<std::vector<std::unique_ptr<Communicator>>>();
    owned->push_back(std::move(side));
    Communicator* servers = K > 1 ? (*owned)[0].get() : nullptr;
    const PsShard shard = shards[static_cast<size_t>(k)];
    Backend* backend = &device;
    Communicator* w = &world;
    out.server_stats = std::make_shared<PsServerStats>();
    auto stats_out = out.server_stats;
    out.serve = [=] {
      (void)owned;
      fmt::print(stderr, "parameter server {} (world rank {}) holds layers [{}, {}): {:.2f} MiB\n",
                 k, rank, shard.first_layer, shard.last_layer,
                 static_cast<double>(shard.end - shard.begin) / (1024.0 * 1024.0));
      // A stop signal does not end a server: the workers still need it for the final save. It is
      // relayed to them, and the server ends when they STOP.
      PreemptionWatch preemption;
      const PsServerStats s = run_parameter_server(*w, servers, pc, shard, *backend,
                                                   [&] { return preemption.requested(nullptr); });
      fmt::print(stderr, "{} (world rank {})\n", s.str(R), rank);
      *stats_out = s;
      return s.stopped_early ? kExitPreempted : 0;
    };
    return out;
  }
  // Worker (r, s) = world rank r * S + s, as make_process_data_parallel places a pipeline's
  // devices; its replica's stages meet in a pipeline group (collective over the workers only).
  const int r = rank / S, s = rank % S;
  std::unique_ptr<Communicator> pipeline;
  if (S > 1) pipeline = side->split(r, s, fmt::format("pipeline of replica {}", r));
  auto parts = std::make_unique<ParameterServerTrainer::Parts>();
  parts->replicas = R;
  parts->clients.push_back(std::make_unique<PsClient>(world, rank, pc, shards));
  DataParallelTrainer::Parts dp;
  dp.world = side.get();
  dp.local_step_stats = ps.staleness > 0;
  dp.local_stats_group = pipeline.get();
  dp.local_stats_scale = R;
  dp.models.push_back(std::make_unique<Model>(make_model()));
  std::vector<Backend*> devices(static_cast<size_t>(S), nullptr);
  std::vector<PsClient*> clients(static_cast<size_t>(S), nullptr);
  devices[static_cast<size_t>(s)] = &device;
  clients[static_cast<size_t>(s)] = parts->clients.back().get();
  dp.replicas.push_back(make_worker(*dp.models.back(), std::move(devices), config, r, R,
                                    std::move(clients), pipeline.get()));
  if (pipeline) dp.communicators.push_back(std::move(pipeline));
  out.workers = side.get();
  out.lockstep = ps.staleness > 0 ? dp.local_stats_group : side.get();
  parts->workers_group = side.get();
  parts->asynchronous = ps.staleness > 0;
  parts->communicators.push_back(std::move(side));
  parts->workers = std::make_unique<DataParallelTrainer>(std::move(dp));
  out.engine = std::make_unique<ParameterServerTrainer>(std::move(parts));
  return out;
}

}  // namespace pt
