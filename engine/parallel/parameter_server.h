#pragma once
// A parameter server (--ps K), written against Communicator only, so one implementation serves
// K server threads with in-process communicators and K extra processes under mpirun.
//
// The "ps" group: ranks [0, R * S) are the workers (replica r's stage s = rank r * S + s), ranks
// [R * S, R * S + K) the servers (server k = rank R * S + k). Server k holds a contiguous run of
// whole layers of the model (shard_by_layer: balanced by bytes), their parameters and the
// optimizer state; with S > 1 pipeline stages that run is cut at the stage boundaries into
// pieces, one per stage it touches, each with its own arenas and optimizer. A worker computes its
// stage's gradients, pushes each piece's bytes of its flat gradient arena to the owner, and pulls
// that piece's fresh parameters back into its flat parameter arena: a stage's worker talks only
// to the servers holding its layers, about its layers only.
//
//   replica 0, first step: INIT(params, optimizer state, its step count, the step) -> every
//                          server (so a resumed run continues where its checkpoint stopped: the
//                          workers load the checkpoint, and the servers need no file access nor
//                          know its format); every worker pulls
//   a save (collective):   FETCH -> every server  <- STATE(params, optimizer state, step count)
//                          synchronous: every worker asks at the same step boundary and the
//                          server answers once all R asked; asynchronous: the worker pauses
//                          (as for PAUSE) and its next step pulls afresh (RESUME)
//   every worker, step t:  PUSH(grads, version it computed on) -> every server holding layers
//                          of its stage <- PARAMS(version, norm, skipped) from each of them
//   every worker, at end:  STOP -> every server; also a worker that never started (a resumed
//                          checkpoint already at the last step): a server that gets STOP from
//                          replica 0 where INIT was due takes every worker's STOP and ends
//   asynchronous only:     PAUSE before an evaluation (the workers wait for each other there),
//                          RESUME + PARAMS before the next step
//
// Stop signals (SIGTERM from a scheduler, Ctrl-C: engine/process/preemption.h). Synchronous workers
// meet every step and agree on a stop there. Asynchronous ones never do, so the servers relay it: a
// worker that stops early says so (PAUSE with its stop flag set), and every reply after that
// carries the stop flag, so each other worker stops after the step it is in and all of them reach
// the final save; a signal to a server process itself is relayed the same way (the server keeps
// serving until the workers STOP, which say whether they stopped early).
//
// Staleness T (--staleness):
// - T = 0 (synchronous): a server waits for all R pushes of a step for every piece it holds
//   (R x its pieces messages), sums them in replica order
//   r = 0..R-1 (((g0 + g1) + g2) ..., the order the all-reduce uses), then runs the epilogue's
//   maths on its shard: the global norm from per-tensor sums of squares in global tensor order
//   (exchanged between servers: each slot is non-zero on one server, so the sum is exact), skip
//   on a non-finite norm, clip, optimizer step. Parameters equal --dp R [--stages S] all-reduce
//   training bit for bit on the CPU (the optimizer is element-wise and shards start at 64-byte
//   aligned arena offsets, so vectorisation lines up too).
// - T >= 1 (asynchronous): a server applies each push as it arrives (one optimizer step per push,
//   learning rate of global step version / R). Staleness is counted in global steps, one global
//   step = R applied pushes: a worker may not start a step (its pull is held back) while some
//   other worker still computes on parameters more than T global steps (T * R pushes) older than
//   the server's newest. With two workers, one 2x slower, T = 1 lets the fast one run at its own
//   speed. Observed staleness of a push = pushes applied between the pull its gradient was
//   computed on and its own application; it is at most T * R + R - 1 (after the last pull any
//   other worker was allowed while this one computed, each of the R - 1 others pushes at most
//   once more). With S > 1 all of this is per piece, i.e. per stage: a piece's version counts the
//   pushes of that stage's R workers, one global step = one push from every replica of that
//   stage, and the bound compares the workers of the same stage (a replica's stages run in
//   lockstep anyway: they exchange activations every step). In one process the replicas share the
//   training loop, so they still meet every step (staleness comes from the order of their pushes);
//   the fast worker runs ahead only with one process per worker (mpirun). Clipping needs the norm
//   over all shards of one push; servers see pushes in different orders, so --clip-norm with
//   --staleness > 0 needs K = 1 and S = 1 (refused otherwise: with S > 1 a push holds one stage's
//   gradients only).
//
// Every wait has the group's timeout: a dead worker ends the server with a TimeoutError naming its
// world rank; a dead server ends the worker likewise. Waits that another rank's wait may explain
// take two timeouts, so that the rank which knows who stalled reports first (issue 37): a worker
// waiting for a server's reply (the server may wait one timeout for another worker first), and a
// server waiting for a paused worker (which waits for the other workers at a save or an
// evaluation, and names the one that stalled).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/optim/lr_schedule.h"
#include "engine/optim/optimizer.h"
#include "engine/train/stage_parameters.h"
#include "engine/train/step_epilogue.h"
#include "layers/model.h"

namespace pt {

namespace ps_detail {
struct PullHeader;  // ps_protocol.h
}

// One parameter tensor of a server's shard.
struct PsTensor {
  size_t offset = 0;  // bytes from the start of its shard (or piece)
  int64_t numel = 0;
  size_t global_index = 0;  // in the model's global tensor order (the norm's order)
};

// The part of one server's layers that lies in one pipeline stage: bytes of that stage's flat
// arenas (what its worker pushes and pulls). begin and end are 64-byte aligned arena offsets.
struct PsPiece {
  int stage = 0;
  size_t begin = 0, end = 0;
  std::vector<PsTensor> tensors;  // in global order; offsets from `begin`
  size_t bytes() const { return end - begin; }
};

// The layers one server owns. begin/end/tensors: bytes of the whole model's arena laid out as
// one stage (how the cuts are balanced); pieces: the same layers cut at the stage boundaries,
// in stage order, each in its stage's own arena layout (one piece when S = 1).
struct PsShard {
  size_t begin = 0, end = 0;      // bytes of the flat arena (begin is a tensor's 64-byte offset)
  std::vector<PsTensor> tensors;  // tied copies are left out (they are refused anyway)
  int first_layer = 0, last_layer = 0;  // [first, last)
  std::vector<PsPiece> pieces;          // only pieces with bytes
  size_t floats() const { return (end - begin) / sizeof(float); }
  const PsPiece* piece(int stage) const {
    for (const PsPiece& p : pieces)
      if (p.stage == stage) return &p;
    return nullptr;
  }
};

// The model's layers cut into K contiguous runs, balanced by parameter bytes (each cut at the
// layer boundary nearest to k/K of the total), then each run cut at the stage boundaries
// (`layers_per_stage`; empty: one stage). Throws UsageError when the model has fewer than K
// layers with parameters, or tied parameters (not supported with --ps).
std::vector<PsShard> shard_by_layer(const Model& model, int servers,
                                    const std::vector<int>& layers_per_stage = {});

struct PsConfig {
  int servers = 1;    // K
  int workers = 1;    // R (replicas)
  int stages = 1;     // S: worker ranks are [0, R * S), worker (replica r, stage s) = r * S + s
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
  int pieces = 1;  // stages whose layers it holds: a global step is workers x pieces pushes
  int64_t active_pushes = 0;
  double active_s = 0;
  // A worker stopped on a stop signal, or this server's process got one.
  bool stopped_early = false;
  double pushes_per_s() const {
    return active_s > 0 ? static_cast<double>(active_pushes - 1) / active_s : 0;
  }
  double mean_staleness() const { return pushes ? sum_staleness / static_cast<double>(pushes) : 0; }
  std::string str(int workers) const;
};

// Server k's loop, until every worker sent STOP. `ps`: the ps group (rank R + k); `servers`: the
// servers' own group (rank k; null when K = 1), for the norm exchange. `backend`: host memory
// for the shard (a CPU device). `stop_signal`: whether this server's process got a stop signal
// (polled before each reply; empty for a server thread, whose process's training loop watches).
// Throws TimeoutError naming the world rank of a silent worker.
PsServerStats run_parameter_server(Communicator& ps, Communicator* servers, const PsConfig& config,
                                   const PsShard& shard, Backend& backend,
                                   std::function<bool()> stop_signal = {});

// A worker's side: replaces the step epilogue of its PipelineTrainer (ParallelContext).
class PsClient {
 public:
  PsClient(Communicator& ps, int worker, const PsConfig& config, std::vector<PsShard> shards);
  // Sends STOP to every server (errors are printed: a destructor must not throw).
  ~PsClient();
  PsClient(const PsClient&) = delete;
  PsClient& operator=(const PsClient&) = delete;

  // Before every step, in two halves so that one thread holding several stages sends for all of
  // them before it waits for any (a synchronous server replies once all its workers sent):
  // begin_step(): the first time, replica 0's worker sends its parameters and optimizer state
  // (a loaded checkpoint's full-layout Optimizer, which it never steps; none: zeros, no steps
  // taken) to the servers; after pause(), RESUME. Returns whether finish_pull() must follow (a
  // pull).
  bool begin_step(StageParameters& stage, const Optimizer* optimizer, int64_t step);
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
  // The end of a step, in two halves as begin_step: push the step's gradients, then finish_pull()
  // (fresh parameters; norm and skip as the servers saw them).
  void push_gradients(StageParameters& stage, int64_t step);
  EpilogueResult finish_pull(StageParameters& stage);
  // Stop signals: whether a reply said some other worker (or a server's process) was asked to
  // stop; and this worker's own early stop, announced to the servers when asynchronous (so they
  // relay it) and carried by its STOP.
  bool stop_asked() const { return stop_asked_; }
  void announce_stop();
  int stage() const { return worker_ % config_.stages; }
  int replica() const { return worker_ / config_.stages; }
  bool started() const { return started_; }

 private:
  void push(StageParameters& stage, int64_t kind, int64_t step);
  void send_init(StageParameters& stage, const Optimizer* optimizer, int64_t step);
  // A header-only message of `kind` (STOP, FETCH, PAUSE; stop flag = stopping_) to every server
  // of this worker's stage, waited for.
  void tell_servers(int64_t kind, const char* what);
  int server_rank(size_t contact) const;
  // The header of server `contact`'s reply (parameters or state), waiting up to two timeouts.
  ps_detail::PullHeader receive_reply(size_t contact, const std::string& what);

  Communicator& ps_;
  int worker_;
  PsConfig config_;
  // The servers holding a piece of this worker's stage, and those pieces.
  std::vector<int> servers_;
  std::vector<PsPiece> pieces_;
  int64_t version_ = 0;  // of the parameters this worker computes on (in pushes)
  bool started_ = false, stopped_ = false, paused_ = false;
  bool stop_asked_ = false, stopping_ = false;
};

}  // namespace pt
