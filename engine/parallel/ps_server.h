#pragma once
// One parameter server (run_parameter_server, parameter_server.h): the pieces of the layers it
// holds, the start (INIT, or STOP before any step), and what its two loops share (replies,
// FETCH, stop signals, the norm, the update). The synchronous loop is in ps_server.cpp, the
// asynchronous one (bounded staleness: one thread per worker) in ps_server_async.cpp.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/core/arena.h"
#include "engine/core/backend.h"
#include "engine/optim/optimizer.h"
#include "engine/parallel/parameter_server.h"
#include "engine/parallel/ps_protocol.h"

namespace pt::ps_detail {

class PsServer {
 public:
  PsServer(Communicator& ps, Communicator* servers, const PsConfig& config, const PsShard& shard,
           Backend& backend, std::function<bool()> stop_signal);

  // Until every worker sent STOP: INIT, then either loop.
  PsServerStats run();

 private:
  // One stage's part of this server's layers: its own arenas and optimizer (asynchronous pushes
  // update one stage's piece at a time).
  struct Piece {
    PsPiece shape;
    SizeTable table;
    Arena params, grads;
    std::unique_ptr<Optimizer> optimizer;
    int64_t version = 0;          // pushes applied (of this stage's workers)
    std::vector<int64_t> on;      // per replica: the version it pulled last
    std::vector<bool> computing;  // per replica: between its pull and push
    std::vector<Arena> pushed;    // per replica: its last push (asynchronous)
    int sending = 0;              // asynchronous: replies being sent straight from `params`
    std::vector<int> sending_to;  // per replica: of those, to its worker (named in a timeout)
    std::vector<std::vector<std::byte>> state_out;  // per replica: its reply to FETCH
  };

  int worker_rank(int r, const Piece& p) const { return r * config_.stages + p.shape.stage; }
  int slots() const { return config_.optimizer.state_slots(); }

  // ---- shared by both loops (ps_server.cpp) ----

  // Replica 0 said STOP instead of INIT for `stopped` of the pieces: the workers had nothing to
  // train. Every other worker of those stages says STOP too (PsClient's destructor, whether or
  // not it started); their STOPs are received so that no message is left unmatched, and the
  // server ends at once instead of waiting a timeout for an INIT that never comes.
  void end_before_start(int stopped);

  // Sends the current parameters to every worker at once, then waits for the sends (the
  // buffers are reused).
  void reply_all(bool skipped, double norm);

  // The reply to FETCH: parameters, optimizer state and its step count, to replica r's worker
  // of piece p's stage. Packed under the lock when asynchronous (the state as it is now), and
  // sent without it: a worker stopped before it takes its reply must not hold back the other
  // workers' replies for a timeout, or their own waits would time out first and blame this
  // healthy server instead of the stopped worker (issue 37).
  PullHeader pack_reply_state(Piece& p, int r);
  void send_state(Piece& p, int r);
  void send_state(Piece& p, int r, const PullHeader& header);

  // A stop signal, relayed (called under the lock when asynchronous): a worker's PAUSE or STOP
  // said it stops early, or this server's own process got the signal. Asynchronous workers never
  // meet per step, so they learn it from the next reply (PullHeader::stop) and stop after their
  // current step; every save then finds all of them stopped.
  void note_stop(const PushHeader& h);
  int64_t stop_flag();

  // Called under the lock (async) or by the one thread (sync) for every push and STOP.
  void count(bool stop);

  std::string sending_parameters(int to) const;
  std::string what(int r, const Piece& p) const;

  // The epilogue's norm over every server's tensors, in global order (`only`: that piece's
  // tensors only, for asynchronous pushes, which servers see in different orders). The pieces
  // are in stage order, so this server's tensors are in global order too.
  // `only`: that piece's gradients, at `only_grads` (an asynchronous push, where they are).
  double global_norm(const Piece* only = nullptr, const float* only_grads = nullptr);

  // The optimizer step on piece p's gradients (clipped by `norm`).
  // `g`: the piece's gradients (its arena, or an asynchronous push's buffer).
  void apply(Piece& p, Tensor g, double norm, float lr);

  // ---- synchronous (staleness 0; ps_server.cpp) ----

  // Every step: all R pushes of every piece summed in replica order, the norm, one update,
  // every worker's reply.
  void run_synchronous();

  // ---- asynchronous (staleness >= 1; ps_server_async.cpp) ----

  // One thread per worker (replica r of a piece's stage): receive, apply under the lock, hold
  // the pull back while the bound says so, reply.
  void run_asynchronous();
  void serve_worker(Piece& p, int r);

  // The next message of replica r's worker of piece p's stage. A paused worker (an evaluation, a
  // save, agreeing on a stop) waits meanwhile for the other workers, and that wait names the one
  // that stalled (a collective waits a little longer than one timeout); so the server gives it
  // one more timeout before it blames this worker, or a healthy worker waiting at a save for a
  // stopped one was the first to be blamed (issue 37).
  PushHeader receive_from_worker(const Piece& p, int r, bool paused);

  // "worker 1 (world rank 1), ...": the workers a reply of piece p is being sent to (under the
  // lock).
  std::string replies_in_flight(const Piece& p) const;

  Communicator& ps_;
  Communicator* servers_;
  PsConfig config_;
  Backend& backend_;
  std::vector<std::unique_ptr<Piece>> pieces_;  // in stage order
  int64_t step_ = 0;                            // optimizer steps' global step (sync)
  PsServerStats stats_;
  // Asynchronous mode.
  std::mutex mutex_;
  std::condition_variable changed_;
  bool failed_ = false;
  bool stopped_ = false;  // some worker sent STOP
  // Stop signals: this process's (polled; empty for a server thread) and the sticky flag.
  std::function<bool()> stop_signal_;
  bool stop_asked_ = false;
  std::chrono::steady_clock::time_point first_push_;
};

}  // namespace pt::ps_detail
