#pragma once
// Training with a parameter server (--ps K, engine/parallel/parameter_server.h): R replicas of
// S stages each (R x S workers: one per stage of each replica) run as a DataParallelTrainer whose
// stages push and pull instead of all-reducing; the K servers are threads of this process
// (make_local_parameter_server) or processes of their own under mpirun
// (make_process_parameter_server: world ranks [0, R x S) are the workers, replica r's stage s
// at r x S + s, ranks [R x S, R x S + K) the servers).
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "engine/devices/devices.h"
#include "engine/parallel/parameter_server.h"
#include "engine/replicas/data_parallel_trainer.h"

namespace pt {

struct PsOptions {
  int servers = 1;    // K
  int staleness = 0;  // T
};

class ParameterServerTrainer final : public TrainingEngine {
 public:
  // Destroyed in this order: the workers, the clients (each sends STOP), then the server
  // threads are joined.
  struct Parts {
    std::vector<std::unique_ptr<Communicator>> communicators;
    DeviceSet server_devices;
    std::vector<std::unique_ptr<PsClient>> clients;
    std::unique_ptr<DataParallelTrainer> workers;
    std::vector<std::thread> servers;        // in-process servers
    std::vector<PsServerStats> stats;        // per in-process server, filled when it ends
    std::vector<std::exception_ptr> errors;  // per in-process server
    int replicas = 1;
    int clients_per_replica = 1;  // S in one process (a client per stage), 1 under mpirun
    // Under mpirun: the workers' group (for the barrier before an asynchronous save); else null.
    Communicator* workers_group = nullptr;
    bool asynchronous = false;
  };
  explicit ParameterServerTrainer(std::unique_ptr<Parts> parts);
  ~ParameterServerTrainer() override;

  StepStats train_step(const Tensor& inputs, const Tensor& targets) override {
    return parts_->workers->train_step(inputs, targets);
  }
  // Asynchronous workers say they pause first: evaluation makes them wait for each other.
  EvalStats evaluate(const Tensor& inputs, const Tensor& targets, int64_t chunk = 1000) override {
    for (auto& c : parts_->clients) c->pause();
    return parts_->workers->evaluate(inputs, targets, chunk);
  }
  Model& model() const override { return parts_->workers->model(); }
  uint64_t seed() const override { return parts_->workers->seed(); }
  int64_t step() const override { return parts_->workers->step(); }
  void set_step(int64_t step) override { parts_->workers->set_step(step); }
  std::vector<StageState> stage_states() override { return parts_->workers->stage_states(); }
  std::vector<StageState> all_stage_copies() override {
    return parts_->workers->all_stage_copies();
  }
  // The servers' parameters and optimizer state, fetched into the workers' (collective: every
  // worker takes part, at a step boundary), then replica 0's as usual.
  std::vector<StageState> stages_to_save() override;
  // A stop signal: relayed by the servers (a reply's stop flag); announced to them and, when
  // asynchronous under mpirun, agreed with the other workers (the furthest one's step).
  bool peer_asked_to_stop() const override {
    for (const auto& c : parts_->clients)
      if (c->stop_asked()) return true;
    return false;
  }
  std::optional<int64_t> agree_on_stop(bool stopping) override;

  DataParallelTrainer& workers() const { return *parts_->workers; }
  // Stops the workers and the in-process servers, rethrows a server's failure and returns what
  // each server observed (printed too). Called by the destructor if not before.
  std::vector<PsServerStats> finish();

 private:
  std::unique_ptr<Parts> parts_;
  bool finished_ = false;
};

// R x S workers on `devices` (devices[r * S + s]: replica r's stage s) and K server threads, in
// this process.
std::unique_ptr<ParameterServerTrainer> make_local_parameter_server(
    const std::function<Model()>& make_model, const std::vector<Backend*>& devices,
    const PipelineConfig& config, int replicas, const PsOptions& ps);

// One process of an mpirun job of R x S + K processes (collective over `world`). A worker gets an
// engine, `workers` (the workers' group: the collectives of saves) and `lockstep` (the workers
// that are always at this one's step: all of them when synchronous, this replica's stages when
// asynchronous, null for one stage); a server gets `serve`, which runs its loop until the
// workers stop and returns 0, or kExitPreempted when they stopped early on a stop signal (a
// signal to the server's process is relayed to the workers, engine/parallel/parameter_server.h).
struct PsProcess {
  std::unique_ptr<ParameterServerTrainer> engine;
  Communicator* workers = nullptr;
  Communicator* lockstep = nullptr;
  std::function<int()> serve;
  // A server's: what it observed, filled when serve() returns (for benchmarks).
  std::shared_ptr<PsServerStats> server_stats;
};
PsProcess make_process_parameter_server(const std::function<Model()>& make_model, Backend& device,
                                        const PipelineConfig& config, Communicator& world,
                                        int replicas, const PsOptions& ps);

}  // namespace pt
