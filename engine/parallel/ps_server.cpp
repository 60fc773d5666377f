// The parameter server's loop (run_parameter_server, see parameter_server.h): INIT, then
// synchronous steps (sum, norm, one update per step), FETCH and STOP; what both loops share
// (ps_server.h); and what it observed (PsServerStats). The asynchronous pushes (one thread per
// worker, the staleness bound) are in ps_server_async.cpp.
#include "engine/parallel/ps_server.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/train/step_epilogue.h"

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

PsServer::PsServer(Communicator& ps, Communicator* servers, const PsConfig& config,
                   const PsShard& shard, Backend& backend, std::function<bool()> stop_signal)
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

PsServerStats PsServer::run() {
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
    std::vector<std::byte> msg(state_payload_bytes(p->shape.bytes(), static_cast<size_t>(slots())));
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

void PsServer::end_before_start(int stopped) {
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

void PsServer::reply_all(bool skipped, double norm) {
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

PullHeader PsServer::pack_reply_state(Piece& p, int r) {
  pack_state(p.state_out[static_cast<size_t>(r)], p.params.flat(), p.optimizer.get(),
             static_cast<size_t>(slots()), 0, p.shape.bytes());
  return PullHeader{p.version, 0, 0.0, p.optimizer->steps_taken()};
}

void PsServer::send_state(Piece& p, int r) { send_state(p, r, pack_reply_state(p, r)); }

void PsServer::send_state(Piece& p, int r, const PullHeader& header) {
  const std::vector<std::byte>& out = p.state_out[static_cast<size_t>(r)];
  Sends sends(ps_);
  const int to = worker_rank(r, p);
  sends.message(to, kTagToWorker, header, to, out.data(), out.size());
  sends.wait([&](int) {
    return fmt::format("parameter server {}: sending its state to worker {}", stats_.server, to);
  });
}

void PsServer::note_stop(const PushHeader& h) {
  if (h.stop) stop_asked_ = true;
  stop_flag();  // the server's own signal too, for its exit code
}

int64_t PsServer::stop_flag() {
  if (!stop_asked_ && stop_signal_ && stop_signal_()) stop_asked_ = true;
  stats_.stopped_early = stats_.stopped_early || stop_asked_;
  return stop_asked_ ? 1 : 0;
}

void PsServer::count(bool stop) {
  const auto now = std::chrono::steady_clock::now();
  if (stop) {
    stopped_ = true;
    return;
  }
  if (stopped_) return;
  if (stats_.active_pushes++ == 0) first_push_ = now;
  stats_.active_s = std::chrono::duration<double>(now - first_push_).count();
}

std::string PsServer::sending_parameters(int to) const {
  return fmt::format("parameter server {}: sending parameters to worker {}", stats_.server, to);
}

std::string PsServer::what(int r, const Piece& p) const {
  if (config_.stages == 1)
    return fmt::format("parameter server {} waiting for worker {}'s gradients", stats_.server, r);
  return fmt::format("parameter server {} waiting for worker {}'s gradients (replica {}, stage {})",
                     stats_.server, worker_rank(r, p), r, p.shape.stage);
}

double PsServer::global_norm(const Piece* only, const float* only_grads) {
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

void PsServer::apply(Piece& p, Tensor g, double norm, float lr) {
  const float factor = clip_factor(norm, config_.clip_norm);
  if (factor != 1.f && g.numel()) backend_.scale(factor, g.f32(), g.numel());
  p.optimizer->step(p.params.flat(), g, lr);
}

void PsServer::run_synchronous() {
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
          accumulate(p->grads.flat().f32(), msg.data(), static_cast<int64_t>(bytes / sizeof(float)),
                     ElemType::f32);
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

}  // namespace ps_detail

PsServerStats run_parameter_server(Communicator& ps, Communicator* servers, const PsConfig& config,
                                   const PsShard& shard, Backend& backend,
                                   std::function<bool()> stop_signal) {
  backend.bind_current_thread();
  ps_detail::PsServer server(ps, servers, config, shard, backend, std::move(stop_signal));
  return server.run();
}

}  // namespace pt
