#include "engine/replicas/data_parallel_trainer.h"

#include <exception>
#include <thread>

#include <fmt/format.h>

#include "engine/comm/in_process.h"
#include "engine/core/error.h"
#include "engine/devices/cuda_plugin.h"
#include "engine/parallel/tensor_parallel_group.h"
#include "layers/tensor_parallel/shard_model.h"

namespace pt {

DataParallelTrainer::DataParallelTrainer(Parts parts) : parts_(std::move(parts)) {
  if (parts_.replicas.empty())
    throw UsageError("a data-parallel run needs at least one replica in this process");
}

DataParallelTrainer::~DataParallelTrainer() {
  parts_.replicas.clear();  // before the communicators and models they use
}

void DataParallelTrainer::set_step(int64_t step) {
  for (auto& r : parts_.replicas) r->set_step(step);
}

std::vector<std::vector<StageState>> DataParallelTrainer::tensor_ranks(
    int replica_index, std::vector<const Model*>& models) const {
  const int T = parts_.world ? 1 : tensor_parallel();
  std::vector<std::vector<StageState>> ranks;
  models.clear();
  for (int t = 0; t < T; ++t) {
    PipelineTrainer& copy = replica(replica_index * T + t);
    ranks.push_back(copy.stage_states());
    models.push_back(&copy.model());
  }
  return ranks;
}

WholeStages& DataParallelTrainer::whole_stages() {
  if (!whole_stages_) {
    if (!parts_.whole_model)
      throw std::logic_error("a tensor-parallel run was built without its whole model");
    // Fully sharded copies hold no whole optimizer between checkpoints: the run's kind is given.
    const PipelineConfig& config = replica(0).config();
    whole_stages_ = std::make_unique<WholeStages>(
        std::move(parts_.whole_model), replica(0).stage_states(), replica(0).seed(),
        config.parallel.shards_state() ? &config.trainer.optimizer : nullptr);
  }
  return *whole_stages_;
}

std::vector<StageState> DataParallelTrainer::all_stage_copies() {
  // Tensor ranks: the checkpoint fills the whole stages; stage_copies_loaded cuts the slices.
  if (tensor_parallel() > 1) return whole_stages().states();
  // Sharded: full optimizers for the checkpoint to fill; stage_copies_loaded shards them.
  for (auto& r : parts_.replicas) r->make_full_optimizers();
  std::vector<StageState> all;
  for (auto& r : parts_.replicas)
    for (const StageState& s : r->stage_states()) all.push_back(s);
  return all;
}

void DataParallelTrainer::stage_copies_loaded() {
  if (tensor_parallel() > 1) {
    // Fully sharded tensor ranks: whole units and optimizers to cut the slices into, then
    // handed to the parts.
    const bool sharded = replica(0).config().parallel.shards_state();
    if (sharded)
      for (auto& r : parts_.replicas) r->make_full_optimizers();
    const int T = parts_.world ? 1 : tensor_parallel();
    std::vector<const Model*> models;
    for (int r = 0; r < local_replicas() / T; ++r)
      whole_stages().scatter(tensor_ranks(r, models), models);
    if (sharded)
      for (auto& r : parts_.replicas) r->take_full_optimizers();
    return;
  }
  for (auto& r : parts_.replicas) r->take_full_optimizers();
}

std::vector<StageState> DataParallelTrainer::stage_states() {
  // Fully sharded: every replica gathers its units (collective), replica 0's are handed out.
  if (replica(0).config().parallel.shard_full)
    on_all_replicas([&](int i) { replica(i).gather_whole_parameters(); });
  if (tensor_parallel() > 1) return whole_replica_zero();
  return replica(0).stage_states();
}

std::vector<StageState> DataParallelTrainer::whole_replica_zero() {
  // Whole tensors, put together from the tensor ranks of replica 0 (one process: its T copies;
  // one process per rank: an all-gather among the T processes of each device, rank 0 of which
  // holds the result).
  const ParallelContext& par = replica(0).config().parallel;
  if (par.replica != 0) return {};
  if (parts_.world) {
    whole_stages().gather(replica(0).stage_states(), replica(0).model(),
                          *par.tensor_parallel_group);
    if (par.tensor_rank != 0) return {};
  } else {
    std::vector<const Model*> models;
    const auto ranks = tensor_ranks(0, models);
    whole_stages().gather(ranks, models);
  }
  return whole_stages().states();
}

std::vector<StageState> DataParallelTrainer::stages_to_save() {
  // Sharded: the checkpoint holds the unsharded state, gathered from the replicas' shards (a
  // collective: every replica of every process takes part, though replica 0 alone writes).
  if (replica(0).config().parallel.shards_state())
    on_all_replicas([&](int i) { replica(i).gather_full_optimizers(); });
  if (tensor_parallel() > 1) return whole_replica_zero();
  if (replica(0).config().parallel.replica != 0) return {};
  return replica(0).stage_states();
}

bool DataParallelTrainer::reports_loss(int i) const {
  return replica(i).holds_last_stage() && replica(i).config().parallel.tensor_rank == 0;
}

void DataParallelTrainer::on_all_replicas(const std::function<void(int)>& job) {
  std::vector<std::exception_ptr> errors(parts_.replicas.size());
  std::vector<std::thread> threads;
  for (int i = 1; i < local_replicas(); ++i)
    threads.emplace_back([&, i] {
      try {
        job(i);
      } catch (...) {
        errors[static_cast<size_t>(i)] = std::current_exception();
      }
    });
  try {
    job(0);
  } catch (...) {
    errors[0] = std::current_exception();
  }
  for (auto& t : threads) t.join();
  // A replica that failed on its own (e.g. a timeout naming its peer) reports first; the others
  // usually failed because of it.
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

namespace {

// Sums [loss, correct, replicas without a class count] over the world; the loss and correct
// count come only from processes holding a last stage (others contribute zeros).
void sum_over_world(Communicator* world, double& loss, int64_t& correct, std::string_view what) {
  if (!world) return;
  double v[3] = {loss, correct < 0 ? 0.0 : static_cast<double>(correct), correct < 0 ? 1.0 : 0.0};
  world->all_reduce(v, 3, ElemType::f64, ReduceOp::sum, what);
  loss = v[0];
  correct = v[2] > 0 ? -1 : static_cast<int64_t>(v[1]);
}

}  // namespace

StepStats DataParallelTrainer::train_step(const Tensor& inputs, const Tensor& targets) {
  std::vector<StepStats> each(parts_.replicas.size());
  on_all_replicas(
      [&](int i) { each[static_cast<size_t>(i)] = replica(i).train_step(inputs, targets); });
  StepStats out = each[0];  // grad norm, lr and skipped are the same on every replica
  out.loss = 0;
  out.correct = 0;
  out.reserved_bytes = 0;
  for (const StepStats& s : each) out.reserved_bytes += s.reserved_bytes;  // distinct devices
  for (size_t i = 0; i < each.size(); ++i) {
    if (!reports_loss(static_cast<int>(i))) continue;
    out.loss += each[i].loss;
    out.correct = each[i].correct < 0 || out.correct < 0 ? -1 : out.correct + each[i].correct;
  }
  if (parts_.local_step_stats && parts_.world) {
    sum_over_world(parts_.local_stats_group, out.loss, out.correct,
                   "the exchange of the step's loss between a replica's stages");
    const int scale =
        parts_.local_stats_scale > 0 ? parts_.local_stats_scale : parts_.world->size();
    out.loss *= scale;
    if (out.correct > 0) out.correct *= scale;
    return out;
  }
  sum_over_world(parts_.world, out.loss, out.correct,
                 "the exchange of the step's loss between processes");
  return out;
}

std::vector<StepStats> DataParallelTrainer::train_steps(std::span<const HostBatch> batches) {
  if (window() == 1) return TrainingEngine::train_steps(batches);
  // Every local replica runs the same windows at once, each on its own thread (their UPDATEs
  // meet in the data-parallel all-reduces); the loss is summed as in train_step.
  std::vector<std::vector<StepStats>> each(parts_.replicas.size());
  on_all_replicas([&](int i) { each[static_cast<size_t>(i)] = replica(i).train_steps(batches); });
  std::vector<StepStats> out = each[0];  // grad norm and lr are the same on every replica
  for (size_t k = 0; k < out.size(); ++k) {
    StepStats& s = out[k];
    s.loss = 0;
    s.correct = 0;
    s.reserved_bytes = 0;
    for (size_t i = 0; i < each.size(); ++i) {
      s.reserved_bytes += each[i][k].reserved_bytes;
      if (!reports_loss(static_cast<int>(i))) continue;
      s.loss += each[i][k].loss;
      s.correct = each[i][k].correct < 0 || s.correct < 0 ? -1 : s.correct + each[i][k].correct;
    }
    sum_over_world(parts_.world, s.loss, s.correct,
                   "the exchange of the step's loss between processes");
  }
  return out;
}

EvalStats DataParallelTrainer::evaluate(const Tensor& inputs, const Tensor& targets,
                                        int64_t chunk) {
  const int64_t n = inputs.shape()[0];
  std::vector<PipelineTrainer::EvalShare> each(parts_.replicas.size());
  on_all_replicas([&](int i) {
    const ParallelContext& p = replica(i).config().parallel;
    const int64_t first = n * p.replica / p.replicas, end = n * (p.replica + 1) / p.replicas;
    each[static_cast<size_t>(i)] =
        replica(i).evaluate_rows(inputs, targets, first, end - first, n, chunk);
  });
  double loss = 0;
  int64_t correct = 0;
  for (size_t i = 0; i < each.size(); ++i) {
    if (!reports_loss(static_cast<int>(i))) continue;
    loss += each[i].loss;
    correct = each[i].correct < 0 || correct < 0 ? -1 : correct + each[i].correct;
  }
  sum_over_world(parts_.world, loss, correct,
                 "the exchange of the evaluation results between processes");
  EvalStats out;
  out.samples = n;
  out.loss = loss;
  out.accuracy = correct < 0 ? -1.0 : static_cast<double>(correct) / static_cast<double>(n);
  return out;
}

namespace {

// --shard-group G of a fully sharded run over R replicas: G when it splits them (0 < G < R),
// else 0 (one shard group of all R: the data-parallel group serves). Refuses a G that does
// not divide R.
int hybrid_shard_group(const ParallelContext& parallel, int replicas) {
  const int G = parallel.shard_group_size;
  if (!parallel.shard_full || G <= 0 || G >= replicas) {
    if (G > replicas)
      throw UsageError(fmt::format(
          "--shard-group {} is larger than --dp {}: a shard group is G of the R replicas; use a "
          "G that divides {}",
          G, replicas, replicas));
    return 0;
  }
  if (replicas % G != 0)
    throw UsageError(fmt::format(
        "--shard-group {} does not divide --dp {}: the replicas shard within groups of G and "
        "replicate across R / G of them; use a divisor of {}",
        G, replicas, replicas));
  return G;
}

}  // namespace

std::unique_ptr<DataParallelTrainer> make_local_data_parallel(
    const std::function<Model()>& make_model, const std::vector<Backend*>& devices,
    const PipelineConfig& config, int replicas, int tensor_parallel) {
  const int D = config.schedule.num_devices, T = tensor_parallel;
  if (replicas < 1) throw UsageError(fmt::format("--dp {} must be >= 1", replicas));
  if (T < 1) throw UsageError(fmt::format("--tp {} must be >= 1", T));
  if (static_cast<int>(devices.size()) != replicas * D * T)
    throw UsageError(fmt::format(
        "{} replicas x {} pipeline devices x {} tensor ranks need {} devices but {} were given: "
        "list them with --devices (e.g. cpu:0..{})",
        replicas, D, T, replicas * D * T, devices.size(), replicas * D * T - 1));
  const auto device = [&](int r, int d, int t) {
    return devices[static_cast<size_t>((r * D + d) * T + t)];
  };
  DataParallelTrainer::Parts parts;
  // Each group as a list of communicators, element k the k-th member's.
  const auto group = [&](int size, std::string name) {
    std::vector<Communicator*> members;
    for (auto& c : make_in_process_group(size, config.timeout_s, std::move(name))) {
      members.push_back(c.get());
      parts.communicators.push_back(std::move(c));
    }
    return members;
  };
  // data_parallel[d * T + t][r], tensor[r * D + d][t], norm[r][t].
  std::vector<std::vector<Communicator*>> data_parallel, tensor, norm;
  if (replicas > 1)
    for (int d = 0; d < D; ++d)
      for (int t = 0; t < T; ++t)
        data_parallel.push_back(group(replicas, T > 1 ? fmt::format("data-parallel device {} "
                                                                    "tensor rank {}",
                                                                    d, t)
                                                      : fmt::format("data-parallel device {}", d)));
  // --shard-group G < R: shard[(d T + t) (R / G) + g][r % G], replicate[(d T + t) G + k][r / G].
  const int G = hybrid_shard_group(config.parallel, replicas);
  std::vector<std::vector<Communicator*>> shard, replicate;
  if (G > 0)
    for (int d = 0; d < D; ++d)
      for (int t = 0; t < T; ++t) {
        for (int g = 0; g < replicas / G; ++g)
          shard.push_back(group(G, fmt::format("shard group {} of device {}{}", g, d,
                                               T > 1 ? fmt::format(" tensor rank {}", t) : "")));
        for (int k = 0; k < G; ++k)
          replicate.push_back(
              group(replicas / G, fmt::format("replicate group {} of device {}{}", k, d,
                                              T > 1 ? fmt::format(" tensor rank {}", t) : "")));
      }
  if (T > 1)
    for (int r = 0; r < replicas; ++r) {
      for (int d = 0; d < D; ++d)
        tensor.push_back(group(T, fmt::format("tensor-parallel replica {} device {}", r, d)));
      norm.push_back(group(T, fmt::format("tensor-parallel replica {} (gradient norm)", r)));
    }
  for (int r = 0; r < replicas; ++r)
    for (int t = 0; t < T; ++t) {
      PipelineConfig rc = config;
      rc.parallel.replicas = replicas;
      rc.parallel.replica = r;
      rc.parallel.pipeline_group = nullptr;
      rc.parallel.data_parallel_groups.assign(static_cast<size_t>(D), nullptr);
      if (replicas > 1)
        for (int d = 0; d < D; ++d)
          rc.parallel.data_parallel_groups[static_cast<size_t>(d)] =
              data_parallel[static_cast<size_t>(d * T + t)][static_cast<size_t>(r)];
      if (G > 0)
        for (int d = 0; d < D; ++d) {
          const auto at = [](int i) { return static_cast<size_t>(i); };
          rc.parallel.shard_groups.push_back(
              shard[at((d * T + t) * (replicas / G) + r / G)][at(r % G)]);
          rc.parallel.replicate_groups.push_back(replicate[at((d * T + t) * G + r % G)][at(r / G)]);
        }
      std::vector<Backend*> mine;
      for (int d = 0; d < D; ++d) mine.push_back(device(r, d, t));
      TensorParallel tp;
      if (T > 1) {
        auto routed = std::make_unique<CommunicatorTensorParallelGroup>();
        routed->set_overlap(config.parallel.tensor_parallel_overlap);
        for (int d = 0; d < D; ++d)
          routed->add_device(*device(r, d, t),
                             *tensor[static_cast<size_t>(r * D + d)][static_cast<size_t>(t)]);
        tp = TensorParallel{routed.get(), t, T, config.parallel.sequence_parallel};
        parts.tensor_groups.push_back(std::move(routed));
        rc.parallel.tensor_parallel = T;
        rc.parallel.tensor_rank = t;
        rc.parallel.tensor_parallel_group = norm[static_cast<size_t>(r)][static_cast<size_t>(t)];
      }
      parts.models.push_back(std::make_unique<Model>(
          shard_model(make_model(), tp, r == 0 && t == 0 ? &parts.replicated_layers : nullptr)));
      parts.replicas.push_back(std::make_unique<PipelineTrainer>(*parts.models.back(), mine, rc));
    }
  if (T > 1) parts.whole_model = std::make_unique<Model>(make_model());
  return std::make_unique<DataParallelTrainer>(std::move(parts));
}

std::unique_ptr<DataParallelTrainer> make_process_data_parallel(
    const std::function<Model()>& make_model, Backend& device, const PipelineConfig& config,
    Communicator& world, int replicas, int tensor_parallel) {
  const int D = config.schedule.num_devices, T = tensor_parallel;
  if (replicas < 1) throw UsageError(fmt::format("--dp {} must be >= 1", replicas));
  if (T < 1) throw UsageError(fmt::format("--tp {} must be >= 1", T));
  if (world.size() != replicas * D * T)
    throw UsageError(
        fmt::format("{} processes were started but --dp {} x {} pipeline devices{} need {}: start "
                    "mpirun -np {} (or change --stages / --dp{})",
                    world.size(), replicas, D, T > 1 ? fmt::format(" x --tp {}", T) : "",
                    replicas * D * T, replicas * D * T, T > 1 ? " / --tp" : ""));
  const int r = world.rank() / (D * T), d = world.rank() / T % D, t = world.rank() % T;
  DataParallelTrainer::Parts parts;
  parts.world = &world;
  // Created eagerly, in the same order on every rank: a communicator made lazily in the middle
  // of a step could deadlock against a peer already waiting in a transfer.
  auto pipeline = world.split(r * T + t, d,
                              T > 1 ? fmt::format("pipeline of replica {} tensor rank {}", r, t)
                                    : fmt::format("pipeline of replica {}", r));
  auto data_parallel =
      world.split(d * T + t, r,
                  T > 1 ? fmt::format("data-parallel device {} tensor rank {}", d, t)
                        : fmt::format("data-parallel device {}", d));
  std::unique_ptr<Communicator> tensor;
  if (T > 1)
    tensor = world.split(r * D + d, t, fmt::format("tensor-parallel replica {} device {}", r, d));
  std::unique_ptr<Communicator> shard, replicate;
  if (const int G = hybrid_shard_group(config.parallel, replicas); G > 0) {
    shard = world.split((d * T + t) * (replicas / G) + r / G, r % G,
                        fmt::format("shard group {} of device {}", r / G, d));
    replicate = world.split((d * T + t) * G + r % G, r / G,
                            fmt::format("replicate group {} of device {}", r % G, d));
  }
  // GPUs all-reduce their gradients with NCCL, in device memory, when every replica of this
  // device has a GPU of its own (NCCL refuses two ranks on one GPU); otherwise through the host
  // over MPI. The MPI group stays: it carried NCCL's unique id and stays its bootstrap.
  std::unique_ptr<Communicator> nccl;
  // --shard-optimizer and --shard full exchange through host buffers: they keep the MPI group.
  if (replicas > 1 && !config.parallel.shards_state() && device.device().kind == DeviceKind::cuda &&
      nccl_usable(*data_parallel, device))
    nccl = make_nccl_communicator(*data_parallel, device,
                                  fmt::format("nccl data-parallel device {}", d));
  PipelineConfig rc = config;
  rc.parallel.replicas = replicas;
  rc.parallel.replica = r;
  rc.parallel.pipeline_group = pipeline.get();
  rc.parallel.data_parallel_groups.assign(static_cast<size_t>(D), nullptr);
  if (replicas > 1)
    rc.parallel.data_parallel_groups[static_cast<size_t>(d)] =
        nccl ? nccl.get() : data_parallel.get();
  if (shard) {
    rc.parallel.shard_groups.assign(static_cast<size_t>(D), nullptr);
    rc.parallel.replicate_groups.assign(static_cast<size_t>(D), nullptr);
    rc.parallel.shard_groups[static_cast<size_t>(d)] = shard.get();
    rc.parallel.replicate_groups[static_cast<size_t>(d)] = replicate.get();
    parts.communicators.push_back(std::move(shard));
    parts.communicators.push_back(std::move(replicate));
  }
  std::vector<Backend*> devices(static_cast<size_t>(D), nullptr);
  devices[static_cast<size_t>(d)] = &device;
  TensorParallel tp;
  if (tensor) {
    // The layers' collectives go through NCCL, in device memory, when each of this device's T
    // ranks has a GPU of its own (as the gradient all-reduce above); otherwise, and for the
    // gradient norm's completion and the checkpoints' gathers (host buffers), through MPI.
    std::unique_ptr<Communicator> tensor_nccl;
    if (device.device().kind == DeviceKind::cuda && nccl_usable(*tensor, device))
      tensor_nccl = make_nccl_communicator(
          *tensor, device, fmt::format("nccl tensor-parallel replica {} device {}", r, d));
    auto group =
        std::make_unique<CommunicatorTensorParallelGroup>(tensor_nccl ? *tensor_nccl : *tensor);
    if (tensor_nccl) parts.communicators.push_back(std::move(tensor_nccl));
    group->set_overlap(config.parallel.tensor_parallel_overlap);
    parts.tensor_groups.push_back(std::move(group));
    tp = TensorParallel{parts.tensor_groups.back().get(), t, T, config.parallel.sequence_parallel};
    rc.parallel.tensor_parallel = T;
    rc.parallel.tensor_rank = t;
    rc.parallel.tensor_parallel_group = tensor.get();
    parts.communicators.push_back(std::move(tensor));
  }
  parts.communicators.push_back(std::move(pipeline));
  parts.communicators.push_back(std::move(data_parallel));
  if (nccl) parts.communicators.push_back(std::move(nccl));
  parts.models.push_back(
      std::make_unique<Model>(shard_model(make_model(), tp, &parts.replicated_layers)));
  if (T > 1) parts.whole_model = std::make_unique<Model>(make_model());
  parts.replicas.push_back(std::make_unique<PipelineTrainer>(*parts.models.back(), devices, rc));
  return std::make_unique<DataParallelTrainer>(std::move(parts));
}

}  // namespace pt
