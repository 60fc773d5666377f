// The parameter server's asynchronous loop (--staleness T >= 1; parameter_server.h): one thread
// per worker applies each push as it arrives and holds a worker's pull back while another worker
// of its stage computes on parameters more than T global steps old.
#include "engine/parallel/ps_server.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt::ps_detail {

PushHeader PsServer::receive_from_worker(const Piece& p, int r, bool paused) {
  return receive_header<PushHeader>(ps_, worker_rank(r, p), kTagToServer,
                                    paused ? what(r, p) + " (it paused: two timeouts)" : what(r, p),
                                    paused ? 2 : 1);
}

std::string PsServer::replies_in_flight(const Piece& p) const {
  std::string out;
  for (int s = 0; s < config_.workers; ++s)
    if (p.sending_to[static_cast<size_t>(s)] > 0)
      out += fmt::format("{}worker {} (world rank {})", out.empty() ? "" : ", ", worker_rank(s, p),
                         ps_.world_rank(worker_rank(s, p)));
  return out.empty() ? fmt::format("a worker of stage {}", p.shape.stage) : out;
}

void PsServer::run_asynchronous() {
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

void PsServer::serve_worker(Piece& p, int r) {
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
      throw std::runtime_error(fmt::format("parameter server: unexpected message {} from worker {}",
                                           h.kind, worker_rank(r, p)));
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

}  // namespace pt::ps_detail
