#pragma once
// A parameter server (--ps K), written against Communicator only, so one implementation serves
// K server threads with in-process communicators and K extra processes under mpirun.
//
// The "ps" group: ranks [0, R) are the workers (replica r = rank r; S = 1), ranks [R, R + K)
// the servers (server k = rank R + k). Server k holds a contiguous run of whole layers of the
// model (shard_by_layer: balanced by bytes), their parameters and the optimizer state; a worker
// computes its replica's gradients, pushes each shard's bytes of its flat gradient arena to the
// owner, and pulls that shard's fresh parameters back into its flat parameter arena.
//
//   worker 0, first step:  INIT(params, optimizer state, its step count, the step) -> every
//                          server (so a resumed run continues where its checkpoint stopped: the
//                          workers load the checkpoint, and the servers need no file access nor
//                          know its format); every worker pulls
//   a save (collective):   FETCH -> every server  <- STATE(params, optimizer state, step count)
//                          synchronous: every worker asks at the same step boundary and the
//                          server answers once all R asked; asynchronous: the worker pauses
//                          (as for PAUSE) and its next step pulls afresh (RESUME)
//   every worker, step t:  PUSH(grads, version it computed on) -> every server
//                          <- PARAMS(version, norm, skipped) from every server
//   every worker, at end:  STOP -> every server
//   asynchronous only:     PAUSE before an evaluation (the workers wait for each other there),
//                          RESUME + PARAMS before the next step
//
// Staleness T (--staleness):
// - T = 0 (synchronous): a server waits for all R pushes of a step, sums them in replica order
//   r = 0..R-1 (((g0 + g1) + g2) ..., the order the all-reduce uses), then runs the epilogue's
//   maths on its shard: the global norm from per-tensor sums of squares in global tensor order
//   (exchanged between servers: each slot is non-zero on one server, so the sum is exact), skip
//   on a non-finite norm, clip, optimizer step. Parameters equal --dp R all-reduce training bit
//   for bit on the CPU (the optimizer is element-wise and shards start at 64-byte aligned arena
//   offsets, so vectorisation lines up too).
// - T >= 1 (asynchronous): a server applies each push as it arrives (one optimizer step per push,
//   learning rate of global step version / R). Staleness is counted in global steps, one global
//   step = R applied pushes: a worker may not start a step (its pull is held back) while some
//   other worker still computes on parameters more than T global steps (T * R pushes) older than
//   the server's newest. With two workers, one 2x slower, T = 1 lets the fast one run at its own
//   speed. Observed staleness of a push = pushes applied between the pull its gradient was
//   computed on and its own application; it is at most T * R + R - 1 (after the last pull any
//   other worker was allowed while this one computed, each of the R - 1 others pushes at most
//   once more). In one process the replicas share the training loop, so they still meet every
//   step (staleness comes from the order of their pushes); the fast worker runs ahead only with
//   one process per worker (mpirun).
//   Clipping needs the norm over all shards of one push; servers see pushes in different orders,
//   so --clip-norm with --staleness > 0 needs K = 1 (refused otherwise).
//
// Every wait has the group's timeout: a dead worker ends the server with a TimeoutError naming its
// world rank; a dead server ends the worker likewise.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/lr_schedule.h"
#include "engine/optimizer.h"
#include "engine/stage_parameters.h"
#include "engine/step_epilogue.h"
#include "layers/model.h"

namespace pt {

// The bytes of a stage's flat arenas that one server owns, and the tensors in them.
struct PsShard {
  size_t begin = 0, end = 0;  // bytes of the flat arena (begin is a tensor's 64-byte offset)
  struct Tensor1 {
    size_t offset = 0;  // bytes from `begin`
    int64_t numel = 0;
    size_t global_index = 0;  // in the model's global tensor order (the norm's order)
  };
  std::vector<Tensor1> tensors;         // tied copies are left out (they are refused anyway)
  int first_layer = 0, last_layer = 0;  // [first, last)
  size_t floats() const { return (end - begin) / sizeof(float); }
};

// The model's layers cut into K contiguous runs, balanced by parameter bytes (each cut at the
// layer boundary nearest to k/K of the total). Throws UsageError when the model has fewer than K
// layers with parameters, or tied parameters (not supported with --ps).
std::vector<PsShard> shard_by_layer(const Model& model, int servers);

struct PsConfig {
  int servers = 1;    // K
  int workers = 1;    // R
  int staleness = 0;  // T (0: synchronous)
  OptimizerConfig optimizer;
  LrSchedule lr;
  float clip_norm = 0.f;
};

// What one server observed (printed at its end, and read by the tests).
struct PsServerStats {
  int server = 0;
  int64_t pushes = 0;         // gradients applied
  int64_t updates = 0;        // optimizer steps (sync: pushes / R)
  int64_t max_staleness = 0;  // in pushes
  double sum_staleness = 0;   // in pushes
  size_t held_bytes = 0;      // parameters + gradients + optimizer state on the server
  // Throughput while every worker still runs (from the first push to the last push before any
  // STOP): a fast asynchronous worker stops first, after which the rate is the slow one's alone.
  int64_t active_pushes = 0;
  double active_s = 0;
  double pushes_per_s() const {
    return active_s > 0 ? static_cast<double>(active_pushes - 1) / active_s : 0;
  }
  double mean_staleness() const { return pushes ? sum_staleness / static_cast<double>(pushes) : 0; }
  std::string str(int workers) const;
};

// Server k's loop, until every worker sent STOP. `ps`: the ps group (rank R + k); `servers`: the
// servers' own group (rank k; null when K = 1), for the norm exchange. `backend`: host memory
// for the shard (a CPU device). Throws TimeoutError naming the world rank of a silent worker.
PsServerStats run_parameter_server(Communicator& ps, Communicator* servers, const PsConfig& config,
                                   const PsShard& shard, Backend& backend);

// A worker's side: replaces the step epilogue of its PipelineTrainer (ParallelContext).
class PsClient {
 public:
  PsClient(Communicator& ps, int worker, const PsConfig& config, std::vector<PsShard> shards);
  // Sends STOP to every server (errors are printed: a destructor must not throw).
  ~PsClient();
  PsClient(const PsClient&) = delete;
  PsClient& operator=(const PsClient&) = delete;

  // Before every step: the first time, worker 0 sends its parameters and optimizer state (its
  // full-layout Optimizer, which it never steps: a loaded checkpoint's, or zeros) to the servers
  // and every worker pulls; after pause(), a fresh pull (under the staleness bound).
  void before_step(StageParameters& stage, const Optimizer& optimizer, int64_t step);
  // A save: request_state() asks every server for its parameters and optimizer state (false, and
  // nothing sent, before the first step or after the end: the worker's own are current then);
  // receive_state() then writes them into the worker's arenas and Optimizer. Split so that the
  // R workers of one process can all ask before any waits (a synchronous server answers once all
  // R asked).
  bool request_state();
  void receive_state(StageParameters& stage, Optimizer& optimizer);
  // Asynchronous only (no-op otherwise): this worker stops computing for a while (evaluation, where
  // the workers wait for each other), so the bound must not hold the others back for its push.
  void pause();
  // Pushes the step's gradients, pulls fresh parameters (norm and skip as the servers saw them).
  EpilogueResult exchange(StageParameters& stage, int64_t step);
  bool started() const { return started_; }

 private:
  void push(StageParameters& stage, int64_t kind, int64_t step);
  void send_init(StageParameters& stage, const Optimizer& optimizer, int64_t step);
  EpilogueResult pull(StageParameters& stage);

  Communicator& ps_;
  int worker_;
  PsConfig config_;
  std::vector<PsShard> shards_;
  std::vector<std::vector<std::byte>> out_, in_;  // per server: header + payload
  int64_t version_ = 0;  // of the parameters this worker computes on (in pushes)
  bool started_ = false, stopped_ = false, paused_ = false;
};

}  // namespace pt
