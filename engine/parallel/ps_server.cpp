// The parameter server's loop (run_parameter_server, see parameter_server.h): INIT, then
// synchronous steps (sum, norm, one update per step) or asynchronous pushes (one thread per
// worker, the staleness bound), FETCH and STOP; and what it observed (PsServerStats).
#include "engine/parallel/parameter_server.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "engine/core/arena.h"
#include "engine/core/error.h"
#include "engine/parallel/ps_protocol.h"

namespace pt {

std::string PsServerStats::str(int workers) const {
  return fmt::format(
      "parameter server {}: {} pushes applied in {} updates; staleness max {} pushes ({:.2f} "
      "global steps), mean {:.3f} pushes ({:.3f} global steps); holds {:.2f} MiB; {:.1f} "
      "pushes/s ({:.2f} global steps/s) while every worker ran{}{}",
      server, pushes, updates, max_staleness, static_cast<double>(max_staleness) / workers,
      mean_staleness(), mean_staleness() / workers,
      static_cast<double>(held_bytes) / (1024.0 * 1024.0), pushes_per_s(),
      pushes_per_s() / (workers * pieces),
      pieces > 1 ? fmt::format(" (layers of {} stages: staleness counted per stage)", pieces)
                 : std::string(),
      stopped_early ? "; stopped early on a stop signal" : "");
}

namespace ps_detail {

namespace {

class Server {
 public:
  Server(Communicator& ps, Communicator* servers, const PsConfig& config, const PsShard& shard,
         Backend& backend, std::function<bool()> stop_signal)
      : ps_(ps),
        servers_(servers),
        config_(config),
        backend_(backend),
        stop_signal_(std::move(stop_signal)) {
    const size_t R = static_cast<size_t>(config.workers);
    for (const PsPiece& shape : shard.pieces) {
      auto p = std::make_unique<Piece>();
      p->shape = shape;
      p->table.add("piece", Shape{static_cast<int64_t>(shape.bytes() / sizeof(float))});
      p->params = Arena(backend, p->table);
      p->optimizer = std::make_unique<Optimizer>(config.optimizer, backend, p->table);
      p->state_out.resize(R);  // before the threads: no insertion later
      p->sending_to.assign(R, 0);
      const size_t bytes = p->table.total_bytes();
      size_t copies = 1 + static_cast<size_t>(config.optimizer.state_slots());
      if (config.staleness == 0) {  // the replicas' gradients are summed here
        p->grads = Arena(backend, p->table);
        copies += 1;
      } else {
        // Each worker's push is received into, and applied from, its own buffer (allocated
        // here, before the serving threads, which share the backend).
        for (size_t r = 0; r < R; ++r) p->pushed.emplace_back(backend, p->table);
        copies += R;
      }
      stats_.held_bytes += bytes * copies;
      pieces_.push_back(std::move(p));
    }
    stats_.server = ps.rank() - config.workers * config.stages;
    stats_.pieces = static_cast<int>(pieces_.size());
  }

  PsServerStats run() {
    const int R = config_.workers;
    // INIT from replica 0's worker of each stage held: the starting parameters and step.
    // With the optimizer state: a resumed run continues where its checkpoint stopped.
    // STOP instead: the workers stopped before their first step (a resumed checkpoint already
    // at the last step, or a stop signal first), and this server has nothing to serve.
    int never_started = 0;
    for (auto& p : pieces_) {
      const std::string what = fmt::format(
          "parameter server {} waiting for the initial parameters of stage {} from replica 0",
          stats_.server, p->shape.stage);
      const auto h = receive_header<PushHeader>(ps_, worker_rank(0, *p), kTagToServer, what);
      if (h.kind == kStop) {
        note_stop(h);
        ++never_started;
        continue;
      }
      if (h.kind != kInit)
        throw std::runtime_error(fmt::format(
            "parameter server {}: expected INIT or STOP from replica 0 (worker {}), got message "
            "kind {}",
            stats_.server, worker_rank(0, *p), h.kind));
      std::vector<std::byte> msg(
          state_payload_bytes(p->shape.bytes(), static_cast<size_t>(slots())));
      ps_.recv(msg.data(), msg.size(), worker_rank(0, *p), kTagToServer, what);
      unpack_state(msg, p->params.flat(), *p->optimizer, 0, p->shape.bytes());
      p->optimizer->set_steps_taken(h.optimizer_steps);
      step_ = h.step;
      // Asynchronous: the learning rate follows version / R, the global step.
      p->version = h.step * R;
      p->on.assign(static_cast<size_t>(R), p->version);
      p->computing.assign(static_cast<size_t>(R), true);
    }
    if (never_started > 0) {
      end_before_start(never_started);
      return stats_;
    }
    reply_all(false, 0.0);
    if (config_.staleness == 0)
      run_synchronous();
    else
      run_asynchronous();
    return stats_;
  }

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

  // Replica 0 said STOP instead of INIT for `stopped` of the pieces: the workers had nothing to
  // train. Every other worker of those stages says STOP too (PsClient's destructor, whether or
  // not it started); their STOPs are received so that no message is left unmatched, and the
  // server ends at once instead of waiting a timeout for an INIT that never comes.
  void end_before_start(int stopped) {
    if (stopped != static_cast<int>(pieces_.size()))
      throw std::runtime_error(fmt::format(
          "parameter server {}: replica 0 stopped before its first step on {} of the {} stages "
          "this server holds and started the others; the workers disagree on whether to train",
          stats_.server, stopped, pieces_.size()));
    for (int r = 1; r < config_.workers; ++r)
      for (auto& p : pieces_) {
        const auto h = receive_header<PushHeader>(
            ps_, worker_rank(r, *p), kTagToServer,
            fmt::format("parameter server {} waiting for worker {}'s STOP (replica 0 stopped "
                        "before its first step)",
                        stats_.server, worker_rank(r, *p)));
        if (h.kind != kStop)
          throw std::runtime_error(fmt::format(
              "parameter server {}: replica 0 stopped before its first step but worker {} sent "
              "message kind {}, not STOP",
              stats_.server, worker_rank(r, *p), h.kind));
        note_stop(h);
      }
    count(true);
  }

  // Sends the current parameters to every worker at once, then waits for the sends (the
  // buffers are reused).
  void reply_all(bool skipped, double norm) {
    const int64_t stop = stop_flag();  // the same for every worker: they stop at the same step
    Sends sends(ps_);
    for (auto& p : pieces_)
      for (int r = 0; r < config_.workers; ++r) {
        const int to = worker_rank(r, *p);
        // The parameters themselves: nothing changes them until every send has completed.
        sends.message(to, kTagToWorker, PullHeader{p->version, skipped ? 1 : 0, norm, 0, stop}, to,
                      p->params.flat().f32(), p->shape.bytes());
      }
    sends.wait([&](int to) { return sending_parameters(to); });
  }

  int slots() const { return config_.optimizer.state_slots(); }

  // The reply to FETCH: parameters, optimizer state and its step count, to replica r's worker
  // of piece p's stage. Packed under the lock when asynchronous (the state as it is now), and
  // sent without it: a worker stopped before it takes its reply must not hold back the other
  // workers' replies for a timeout, or their own waits would time out first and blame this
  // healthy server instead of the stopped worker (issue 37).
  PullHeader pack_reply_state(Piece& p, int r) {
    pack_state(p.state_out[static_cast<size_t>(r)], p.params.flat(), p.optimizer.get(),
               static_cast<size_t>(slots()), 0, p.shape.bytes());
    return PullHeader{p.version, 0, 0.0, p.optimizer->steps_taken()};
  }
  void send_state(Piece& p, int r) { send_state(p, r, pack_reply_state(p, r)); }
  void send_state(Piece& p, int r, const PullHeader& header) {
    const std::vector<std::byte>& out = p.state_out[static_cast<size_t>(r)];
    Sends sends(ps_);
    const int to = worker_rank(r, p);
    sends.message(to, kTagToWorker, header, to, out.data(), out.size());
    sends.wait([&](int) {
      return fmt::format("parameter server {}: sending its state to worker {}", stats_.server, to);
    });
  }

  // A stop signal, relayed (called under the lock when asynchronous): a worker's PAUSE or STOP
  // said it stops early, or this server's own process got the signal. Asynchronous workers never
  // meet per step, so they learn it from the next reply (PullHeader::stop) and stop after their
  // current step; every save then finds all of them stopped.
  void note_stop(const PushHeader& h) {
    if (h.stop) stop_asked_ = true;
    stop_flag();  // the server's own signal too, for its exit code
  }
  int64_t stop_flag() {
    if (!stop_asked_ && stop_signal_ && stop_signal_()) stop_asked_ = true;
    stats_.stopped_early = stats_.stopped_early || stop_asked_;
    return stop_asked_ ? 1 : 0;
  }

  // Called under the lock (async) or by the one thread (sync) for every push and STOP.
  void count(bool stop) {
    const auto now = std::chrono::steady_clock::now();
    if (stop) {
      stopped_ = true;
      return;
    }
    if (stopped_) return;
    if (stats_.active_pushes++ == 0) first_push_ = now;
    stats_.active_s = std::chrono::duration<double>(now - first_push_).count();
  }

  std::string sending_parameters(int to) const {
    return fmt::format("parameter server {}: sending parameters to worker {}", stats_.server, to);
  }

  std::string what(int r, const Piece& p) const {
    if (config_.stages == 1)
      return fmt::format("parameter server {} waiting for worker {}'s gradients", stats_.server, r);
    return fmt::format(
        "parameter server {} waiting for worker {}'s gradients (replica {}, stage {})",
        stats_.server, worker_rank(r, p), r, p.shape.stage);
  }

  // The epilogue's norm over every server's tensors, in global order (`only`: that piece's
  // tensors only, for asynchronous pushes, which servers see in different orders). The pieces
  // are in stage order, so this server's tensors are in global order too.
  // `only`: that piece's gradients, at `only_grads` (an asynchronous push, where they are).
  double global_norm(const Piece* only = nullptr, const float* only_grads = nullptr) {
    if (!servers_ || only) {
      double sum = 0;
      for (const auto& p : pieces_) {
        if (only && p.get() != only) continue;
        const float* g = only ? only_grads : p->grads.flat().f32();
        for (const auto& t : p->shape.tensors)
          if (t.numel) sum += backend_.sum_squares(g + t.offset / sizeof(float), t.numel);
      }
      return std::sqrt(sum);
    }
    size_t count = 0;
    for (const auto& p : pieces_)
      for (const auto& t : p->shape.tensors) count = std::max(count, t.global_index + 1);
    int64_t n = static_cast<int64_t>(count);
    servers_->all_reduce(&n, 1, ElemType::i64, ReduceOp::sum, "the tensor count of the servers");
    std::vector<double> squares(static_cast<size_t>(n), 0.0);
    for (const auto& p : pieces_) {
      const float* g = p->grads.flat().f32();
      for (const auto& t : p->shape.tensors)
        if (t.numel)
          squares[t.global_index] = backend_.sum_squares(g + t.offset / sizeof(float), t.numel);
    }
    // Each slot is non-zero on one server only, so the sum is exact whatever the order.
    servers_->all_reduce(squares.data(), n, ElemType::f64, ReduceOp::sum,
                         "the gradient-norm exchange between parameter servers");
    double sum = 0;
    for (double v : squares) sum += v;
    return std::sqrt(sum);
  }

  // The optimizer step on piece p's gradients (clipped by `norm`).
  // `g`: the piece's gradients (its arena, or an asynchronous push's buffer).
  void apply(Piece& p, Tensor g, double norm, float lr) {
    const float factor = clip_factor(norm, config_.clip_norm);
    if (factor != 1.f && g.numel()) backend_.scale(factor, g.f32(), g.numel());
    p.optimizer->step(p.params.flat(), g, lr);
  }

  void run_synchronous() {
    const int R = config_.workers;
    const int contacts = R * static_cast<int>(pieces_.size());
    size_t largest = 0;
    for (const auto& p : pieces_) largest = std::max(largest, p->shape.bytes());
    std::vector<std::byte> msg(largest);
    for (;;) {
      int stops = 0, fetches = 0;
      // ((g0 + g1) + g2) ...: the all-reduce's order, per piece.
      for (int r = 0; r < R; ++r)
        for (auto& p : pieces_) {
          const size_t bytes = p->shape.bytes();
          const auto h =
              receive_header<PushHeader>(ps_, worker_rank(r, *p), kTagToServer, what(r, *p));
          if (h.kind == kStop) {
            ++stops;
            count(true);
            note_stop(h);
            continue;
          }
          if (h.kind == kFetch) {  // a save, at a step boundary: every worker asks
            ++fetches;
            continue;
          }
          count(false);
          if (h.kind != kPush)
            throw std::runtime_error(
                fmt::format("parameter server: unexpected message {} from worker {}", h.kind,
                            worker_rank(r, *p)));
          if (r == 0) {  // straight into the sum
            ps_.recv(p->grads.flat().f32(), bytes, worker_rank(r, *p), kTagToServer, what(r, *p));
          } else {
            ps_.recv(msg.data(), bytes, worker_rank(r, *p), kTagToServer, what(r, *p));
            accumulate(p->grads.flat().f32(), msg.data(),
                       static_cast<int64_t>(bytes / sizeof(float)), ElemType::f32);
          }
          ++stats_.pushes;
        }
      if (stops == contacts) return;
      if (fetches == contacts) {
        for (auto& p : pieces_)
          for (int r = 0; r < R; ++r) send_state(*p, r);
        continue;
      }
      if (stops != 0 || fetches != 0)
        throw std::runtime_error(fmt::format(
            "parameter server {}: of {} workers, {} stopped and {} asked for the state (a save) "
            "while the others pushed a step",
            stats_.server, contacts, stops, fetches));
      const double norm = global_norm();
      const bool skipped = !std::isfinite(norm);
      if (!skipped) {
        for (auto& p : pieces_) apply(*p, p->grads.flat(), norm, config_.lr.at(step_));
        ++stats_.updates;
      }
      ++step_;
      for (auto& p : pieces_) p->version += R;
      reply_all(skipped, norm);
    }
  }

  // The next message of replica r's worker of piece p's stage. A paused worker (an evaluation, a
  // save, agreeing on a stop) waits meanwhile for the other workers, and that wait names the one
  // that stalled (a collective waits a little longer than one timeout); so the server gives it
  // one more timeout before it blames this worker, or a healthy worker waiting at a save for a
  // stopped one was the first to be blamed (issue 37).
  PushHeader receive_from_worker(const Piece& p, int r, bool paused) {
    return receive_header<PushHeader>(
        ps_, worker_rank(r, p), kTagToServer,
        paused ? what(r, p) + " (it paused: two timeouts)" : what(r, p), paused ? 2 : 1);
  }

  // "worker 1 (world rank 1), ...": the workers a reply of piece p is being sent to (under the
  // lock).
  std::string replies_in_flight(const Piece& p) const {
    std::string out;
    for (int s = 0; s < config_.workers; ++s)
      if (p.sending_to[static_cast<size_t>(s)] > 0)
        out += fmt::format("{}worker {} (world rank {})", out.empty() ? "" : ", ",
                           worker_rank(s, p), ps_.world_rank(worker_rank(s, p)));
    return out.empty() ? fmt::format("a worker of stage {}", p.shape.stage) : out;
  }

  // One thread per worker (replica r of a piece's stage): receive, apply under the lock, hold
  // the pull back while the bound says so, reply.
  void run_asynchronous() {
    const int R = config_.workers;
    std::vector<std::exception_ptr> errors(pieces_.size() * static_cast<size_t>(R));
    std::vector<std::thread> threads;
    for (size_t i = 0; i < pieces_.size(); ++i)
      for (int r = 0; r < R; ++r)
        threads.emplace_back([this, i, r, &errors] {
          try {
            serve_worker(*pieces_[i], r);
          } catch (...) {
            errors[i * static_cast<size_t>(config_.workers) + static_cast<size_t>(r)] =
                std::current_exception();
            std::lock_guard lock(mutex_);
            failed_ = true;
            changed_.notify_all();
          }
        });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }

  void serve_worker(Piece& p, int r) {
    const int R = config_.workers;
    const int64_t bound = static_cast<int64_t>(config_.staleness) * R;  // in pushes
    const size_t bytes = p.shape.bytes();
    const auto ri = static_cast<size_t>(r);
    // This worker's gradients, received and applied from here (the piece's own gradient arena is
    // the synchronous sum's).
    const Arena& grads = p.pushed.at(ri);
    bool paused = false;  // since its PAUSE or FETCH, until its next pull
    for (;;) {
      const auto h = receive_from_worker(p, r, paused);
      if (h.kind == kPush)
        ps_.recv(grads.flat().f32(), bytes, worker_rank(r, p), kTagToServer, what(r, p));
      std::unique_lock lock(mutex_);
      p.computing[ri] = false;
      if (h.kind == kFetch) {  // a save: the worker pauses (its next message is RESUME)
        changed_.notify_all();
        const PullHeader header = pack_reply_state(p, r);
        lock.unlock();
        send_state(p, r, header);
        paused = true;
        continue;
      }
      if (h.kind == kStop || h.kind == kPause) {
        if (h.kind == kStop) count(true);
        note_stop(h);
        changed_.notify_all();
        if (h.kind == kStop) return;
        paused = true;
        continue;
      }
      double norm = 0;
      bool skipped = false;
      if (h.kind == kPush) {
        count(false);
        const int64_t stale = p.version - h.version;
        stats_.max_staleness = std::max(stats_.max_staleness, stale);
        stats_.sum_staleness += static_cast<double>(stale);
        ++stats_.pushes;
        // This piece's tensors only (--clip needs K = 1 and S = 1 here). With K > 1 a
        // non-finite gradient skips the update on the servers whose piece holds it.
        norm = global_norm(&p, grads.flat().f32());
        skipped = !std::isfinite(norm);
        // Replies are sent straight from the parameters: they stay as they are until sent.
        if (!skipped && !changed_.wait_until(lock, deadline_after(ps_.timeout_s()),
                                             [&] { return failed_ || p.sending == 0; }))
          throw TimeoutError(fmt::format(
              "parameter server {}: its reply to {} was not received within {:g} s, and worker "
              "{}'s push waits for it",
              stats_.server, replies_in_flight(p), ps_.timeout_s(), worker_rank(r, p)));
        if (failed_) return;
        if (!skipped) {
          apply(p, grads.flat(), norm, config_.lr.at(p.version / R));
          ++stats_.updates;
        }
        ++p.version;
        changed_.notify_all();
      } else if (h.kind != kResume) {
        throw std::runtime_error(fmt::format(
            "parameter server: unexpected message {} from worker {}", h.kind, worker_rank(r, p)));
      }
      // The pull waits while another worker of this stage computes on parameters more than T
      // global steps old.
      const auto deadline = deadline_after(ps_.timeout_s());
      int oldest = -1;
      const auto may_start = [&] {
        if (failed_) return true;
        for (int s = 0; s < R; ++s)
          if (s != r && p.computing[static_cast<size_t>(s)] &&
              p.version - p.on[static_cast<size_t>(s)] > bound) {
            oldest = s;
            return false;
          }
        return true;
      };
      if (!changed_.wait_until(lock, deadline, may_start))
        throw TimeoutError(fmt::format(
            "parameter server {}: worker {} may not start its next step until worker {} (world "
            "rank {}) pushes (staleness bound {} global steps), which it did not within {:g} s",
            stats_.server, worker_rank(r, p), worker_rank(oldest, p),
            ps_.world_rank(worker_rank(oldest, p)), config_.staleness, ps_.timeout_s()));
      if (failed_) return;
      p.on[ri] = p.version;
      p.computing[ri] = true;
      // Straight from the parameters, which no push changes until the send completed (a push
      // waits while `sending`); the lock is not held meanwhile.
      const PullHeader reply{p.version, skipped ? 1 : 0, norm, 0, stop_flag()};
      ++p.sending;
      ++p.sending_to[ri];
      paused = false;
      lock.unlock();
      Sends sends(ps_);
      const int to = worker_rank(r, p);
      sends.message(to, kTagToWorker, reply, to, p.params.flat().f32(), bytes);
      sends.wait([&](int) { return sending_parameters(to); });
      lock.lock();
      --p.sending;
      --p.sending_to[ri];
      changed_.notify_all();
    }
  }

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

}  // namespace
}  // namespace ps_detail

PsServerStats run_parameter_server(Communicator& ps, Communicator* servers, const PsConfig& config,
                                   const PsShard& shard, Backend& backend,
                                   std::function<bool()> stop_signal) {
  backend.bind_current_thread();
  ps_detail::Server server(ps, servers, config, shard, backend, std::move(stop_signal));
  return server.run();
}

}  // namespace pt
