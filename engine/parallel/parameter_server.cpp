#include "engine/parallel/parameter_server.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "engine/core/arena.h"
#include "engine/core/error.h"

namespace pt {

namespace {

// Message kinds of a worker's message (the first int64 of its header).
// kPause / kResume (asynchronous only): a worker that stops computing for a while (evaluation,
// where the workers meet) says so, or the staleness bound would hold the others back waiting for
// its push; before its next step it pulls afresh (kResume), under the bound like any pull.
// kFetch (a checkpoint's save): the server replies with its parameters and optimizer state.
enum : int64_t { kInit = 0, kPush = 1, kStop = 2, kPause = 3, kResume = 4, kFetch = 5 };
constexpr int kTagToServer = 11, kTagToWorker = 12;

// Worker -> server: kind, step (the worker's step counter), version computed on, optimizer
// steps taken (INIT only).
struct PushHeader {
  int64_t kind = 0, step = 0, version = 0, optimizer_steps = 0;
};
// Server -> worker: the version sent, skipped (0/1), the step's global norm, optimizer steps
// taken (the reply to FETCH only).
struct PullHeader {
  int64_t version = 0, skipped = 0;
  double grad_norm = 0;
  int64_t optimizer_steps = 0;
};
static_assert(sizeof(PushHeader) == 32 && sizeof(PullHeader) == 32);

size_t message_bytes(const PsShard& s) { return 32 + (s.end - s.begin); }
// INIT and the reply to FETCH carry the optimizer state too: header, parameters, then each slot.
size_t state_message_bytes(const PsShard& s, int slots) {
  return 32 + (s.end - s.begin) * (1 + static_cast<size_t>(slots));
}

}  // namespace

// ---- sharding ----------------------------------------------------------------------------------

std::vector<PsShard> shard_by_layer(const Model& model, int servers) {
  if (servers < 1) throw UsageError(fmt::format("--ps {} must be >= 1", servers));
  if (!model.ties().empty())
    throw UsageError(
        "--ps does not support tied parameters yet (their gradients are summed across stages "
        "before the update); train this model with --dp instead");
  // The stage arena of the whole model, as StageParameters lays it out (S = 1).
  SizeTable table;
  std::vector<int> layer_of_entry;
  std::vector<size_t> layer_first_entry(static_cast<size_t>(model.num_layers()) + 1, 0);
  for (int l = 0; l < model.num_layers(); ++l) {
    layer_first_entry[static_cast<size_t>(l)] = table.entries().size();
    for (const auto& spec : model.layer(l).param_specs()) {
      table.add(spec.name, spec.shape);
      layer_of_entry.push_back(l);
    }
  }
  layer_first_entry.back() = table.entries().size();
  const size_t total = table.total_bytes();
  const auto layer_begin = [&](int l) {  // byte offset of layer l's first tensor
    const size_t e = layer_first_entry[static_cast<size_t>(l)];
    return e < table.entries().size() ? table.entries()[e].offset : total;
  };
  // Cut points: layer boundaries nearest to k/K of the bytes, strictly increasing.
  std::vector<int> cut{0};
  for (int k = 1; k < servers; ++k) {
    const double target = static_cast<double>(total) * k / servers;
    int best = -1;
    double best_d = 0;
    for (int l = cut.back() + 1; l < model.num_layers(); ++l) {
      if (layer_begin(l) == layer_begin(cut.back())) continue;  // no bytes in between
      const double d = std::abs(static_cast<double>(layer_begin(l)) - target);
      if (best < 0 || d < best_d) best = l, best_d = d;
    }
    if (best < 0 || layer_begin(best) == total)
      throw UsageError(fmt::format(
          "--ps {}: the model has too few layers with parameters to give each server some; use "
          "--ps {} or fewer",
          servers, k));
    cut.push_back(best);
  }
  cut.push_back(model.num_layers());
  std::vector<PsShard> out;
  size_t global = 0;
  for (int k = 0; k < servers; ++k) {
    PsShard s;
    s.first_layer = cut[static_cast<size_t>(k)];
    s.last_layer = cut[static_cast<size_t>(k) + 1];
    s.begin = layer_begin(s.first_layer);
    s.end = k + 1 < servers ? layer_begin(s.last_layer) : total;
    for (size_t e = layer_first_entry[static_cast<size_t>(s.first_layer)];
         e < layer_first_entry[static_cast<size_t>(s.last_layer)]; ++e, ++global) {
      const SizeTableEntry& te = table.entries()[e];
      s.tensors.push_back({te.offset - s.begin, te.shape.numel(), global});
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string PsServerStats::str(int workers) const {
  return fmt::format(
      "parameter server {}: {} pushes applied in {} updates; staleness max {} pushes ({:.2f} "
      "global steps), mean {:.3f} pushes ({:.3f} global steps); holds {:.2f} MiB; {:.1f} "
      "pushes/s ({:.2f} global steps/s) while every worker ran",
      server, pushes, updates, max_staleness, static_cast<double>(max_staleness) / workers,
      mean_staleness(), mean_staleness() / workers,
      static_cast<double>(held_bytes) / (1024.0 * 1024.0), pushes_per_s(),
      pushes_per_s() / workers);
}

// ---- the server
// ----------------------------------------------------------------------------------

namespace {

class Server {
 public:
  Server(Communicator& ps, Communicator* servers, const PsConfig& config, const PsShard& shard,
         Backend& backend)
      : ps_(ps), servers_(servers), config_(config), shard_(shard), backend_(backend) {
    table_.add("shard", Shape{static_cast<int64_t>(shard.floats())});
    params_ = Arena(backend, table_);
    grads_ = Arena(backend, table_);
    optimizer_ = std::make_unique<Optimizer>(config.optimizer, backend, table_);
    out_.resize(static_cast<size_t>(config.workers));  // before the threads: no insertion later
    state_out_.resize(static_cast<size_t>(config.workers));
    stats_.server = ps.rank() - config.workers;
    stats_.held_bytes =
        table_.total_bytes() * (2 + static_cast<size_t>(config.optimizer.state_slots()));
  }

  PsServerStats run() {
    const int R = config_.workers;
    // INIT from worker 0: the starting parameters and step.
    // With the optimizer state: a resumed run continues where its checkpoint stopped.
    std::vector<std::byte> msg(state_message_bytes(shard_, slots()));
    ps_.recv(msg.data(), msg.size(), 0, kTagToServer,
             "a parameter server's wait for worker 0's "
             "initial parameters");
    PushHeader h;
    std::memcpy(&h, msg.data(), sizeof h);
    if (h.kind != kInit) throw std::runtime_error("parameter server: expected INIT from worker 0");
    const size_t bytes = shard_.end - shard_.begin;
    std::memcpy(params_.flat().f32(), msg.data() + 32, bytes);
    for (int i = 0; i < slots(); ++i)
      std::memcpy(optimizer_->slots()[static_cast<size_t>(i)].state.flat().f32(),
                  msg.data() + 32 + bytes * (1 + static_cast<size_t>(i)), bytes);
    optimizer_->set_steps_taken(h.optimizer_steps);
    step_ = h.step;
    // Asynchronous: the learning rate follows version_ / R, the global step.
    version_ = h.step * R;
    on_.assign(static_cast<size_t>(R), version_);
    computing_.assign(static_cast<size_t>(R), true);
    reply_all(false, 0.0);
    if (config_.staleness == 0)
      run_synchronous();
    else
      run_asynchronous();
    return stats_;
  }

 private:
  // Sends the current parameters to every worker at once, then waits for the sends (the
  // buffers are reused).
  void reply_all(bool skipped, double norm) {
    std::vector<std::unique_ptr<CommRequest>> sent;
    for (int r = 0; r < config_.workers; ++r) {
      std::vector<std::byte>& out = out_[static_cast<size_t>(r)];
      out.resize(message_bytes(shard_));
      PullHeader h{version_, skipped ? 1 : 0, norm, 0};
      std::memcpy(out.data(), &h, sizeof h);
      std::memcpy(out.data() + 32, params_.flat().f32(), shard_.end - shard_.begin);
      sent.push_back(ps_.isend(out.data(), out.size(), r, kTagToWorker));
    }
    for (size_t r = 0; r < sent.size(); ++r)
      sent[r]->wait(
          fmt::format("parameter server {}: sending parameters to worker {}", stats_.server, r));
  }

  int slots() const { return static_cast<int>(optimizer_->slots().size()); }

  // The reply to FETCH: parameters, optimizer state and its step count, to worker r (called
  // under the lock when asynchronous).
  void send_state(int r) {
    std::vector<std::byte>& out = state_out_[static_cast<size_t>(r)];
    const size_t bytes = shard_.end - shard_.begin;
    out.resize(state_message_bytes(shard_, slots()));
    PullHeader h{version_, 0, 0.0, optimizer_->steps_taken()};
    std::memcpy(out.data(), &h, sizeof h);
    std::memcpy(out.data() + 32, params_.flat().f32(), bytes);
    for (int i = 0; i < slots(); ++i)
      std::memcpy(out.data() + 32 + bytes * (1 + static_cast<size_t>(i)),
                  optimizer_->slots()[static_cast<size_t>(i)].state.flat().f32(), bytes);
    ps_.isend(out.data(), out.size(), r, kTagToWorker)
        ->wait(
            fmt::format("parameter server {}: sending its state to worker {}", stats_.server, r));
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

  std::string what(int r) const {
    return fmt::format("parameter server {} waiting for worker {}'s gradients", stats_.server, r);
  }

  // The epilogue's norm over every server's tensors, in global order (`local`: this shard's
  // only, for asynchronous pushes, which servers see in different orders).
  double global_norm(bool local = false) {
    std::vector<double> squares;
    const float* g = grads_.flat().f32();
    if (!servers_ || local) {
      double sum = 0;
      for (const auto& t : shard_.tensors)
        if (t.numel) sum += backend_.sum_squares(g + t.offset / sizeof(float), t.numel);
      return std::sqrt(sum);
    }
    size_t count = 0;
    for (const auto& t : shard_.tensors) count = std::max(count, t.global_index + 1);
    int64_t n = static_cast<int64_t>(count);
    servers_->all_reduce(&n, 1, ElemType::i64, ReduceOp::sum, "the tensor count of the servers");
    squares.assign(static_cast<size_t>(n), 0.0);
    for (const auto& t : shard_.tensors)
      if (t.numel)
        squares[t.global_index] = backend_.sum_squares(g + t.offset / sizeof(float), t.numel);
    // Each slot is non-zero on one server only, so the sum is exact whatever the order.
    servers_->all_reduce(squares.data(), n, ElemType::f64, ReduceOp::sum,
                         "the gradient-norm exchange between parameter servers");
    double sum = 0;
    for (double v : squares) sum += v;
    return std::sqrt(sum);
  }

  // The optimizer step on the gradients in grads_ (clipped by `norm`).
  void apply(double norm, float lr) {
    const float factor = clip_factor(norm, config_.clip_norm);
    Tensor g = grads_.flat();
    if (factor != 1.f && g.numel()) backend_.scale(factor, g.f32(), g.numel());
    optimizer_->step(params_.flat(), g, lr);
    ++stats_.updates;
  }

  void run_synchronous() {
    const int R = config_.workers;
    const size_t bytes = shard_.end - shard_.begin;
    const auto n = static_cast<int64_t>(bytes / sizeof(float));
    std::vector<std::byte> msg(message_bytes(shard_));
    for (;;) {
      int stops = 0, fetches = 0;
      for (int r = 0; r < R; ++r) {
        ps_.recv(msg.data(), msg.size(), r, kTagToServer, what(r));
        PushHeader h;
        std::memcpy(&h, msg.data(), sizeof h);
        if (h.kind == kStop) {
          ++stops;
          count(true);
          continue;
        }
        if (h.kind == kFetch) {  // a save, at a step boundary: every worker asks
          ++fetches;
          continue;
        }
        count(false);
        if (h.kind != kPush)
          throw std::runtime_error(
              fmt::format("parameter server: unexpected message {} from "
                          "worker {}",
                          h.kind, r));
        // ((g0 + g1) + g2) ...: the all-reduce's order.
        if (r == 0)
          std::memcpy(grads_.flat().f32(), msg.data() + 32, bytes);
        else
          accumulate(grads_.flat().f32(), msg.data() + 32, n, ElemType::f32);
        ++stats_.pushes;
      }
      if (stops == R) return;
      if (fetches == R) {
        for (int r = 0; r < R; ++r) send_state(r);
        continue;
      }
      if (stops != 0 || fetches != 0)
        throw std::runtime_error(fmt::format(
            "parameter server {}: of {} workers, {} stopped and {} asked for the state (a save) "
            "while the others pushed a step",
            stats_.server, R, stops, fetches));
      const double norm = global_norm();
      const bool skipped = !std::isfinite(norm);
      if (!skipped) apply(norm, config_.lr.at(step_));
      ++step_;
      version_ += R;
      reply_all(skipped, norm);
    }
  }

  // One thread per worker: receive, apply under the lock, hold the pull back while the bound
  // says so, reply.
  void run_asynchronous() {
    const int R = config_.workers;
    std::vector<std::exception_ptr> errors(static_cast<size_t>(R));
    std::vector<std::thread> threads;
    for (int r = 0; r < R; ++r)
      threads.emplace_back([this, r, &errors] {
        try {
          serve_worker(r);
        } catch (...) {
          errors[static_cast<size_t>(r)] = std::current_exception();
          std::lock_guard lock(mutex_);
          failed_ = true;
          changed_.notify_all();
        }
      });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }

  void serve_worker(int r) {
    const int R = config_.workers;
    const int64_t bound = static_cast<int64_t>(config_.staleness) * R;  // in pushes
    const size_t bytes = shard_.end - shard_.begin;
    std::vector<std::byte> msg(message_bytes(shard_));
    for (;;) {
      ps_.recv(msg.data(), msg.size(), r, kTagToServer, what(r));
      PushHeader h;
      std::memcpy(&h, msg.data(), sizeof h);
      std::unique_lock lock(mutex_);
      computing_[static_cast<size_t>(r)] = false;
      if (h.kind == kFetch) {  // a save: the worker pauses (its next message is RESUME)
        changed_.notify_all();
        send_state(r);
        continue;
      }
      if (h.kind == kStop || h.kind == kPause) {
        if (h.kind == kStop) count(true);
        changed_.notify_all();
        if (h.kind == kStop) return;
        continue;
      }
      double norm = 0;
      bool skipped = false;
      if (h.kind == kPush) {
        count(false);
        const int64_t stale = version_ - h.version;
        stats_.max_staleness = std::max(stats_.max_staleness, stale);
        stats_.sum_staleness += static_cast<double>(stale);
        ++stats_.pushes;
        std::memcpy(grads_.flat().f32(), msg.data() + 32, bytes);
        // This shard's tensors only (--clip needs K = 1 here). With K > 1 a non-finite gradient
        // skips the update on the servers whose shard holds it.
        norm = global_norm(/*local=*/true);
        skipped = !std::isfinite(norm);
        if (!skipped) apply(norm, config_.lr.at(version_ / R));
        ++version_;
        changed_.notify_all();
      } else if (h.kind != kResume) {
        throw std::runtime_error(
            fmt::format("parameter server: unexpected message {} from "
                        "worker {}",
                        h.kind, r));
      }
      // The pull waits while another worker computes on parameters more than T global steps old.
      const auto deadline = deadline_after(ps_.timeout_s());
      int oldest = -1;
      const auto may_start = [&] {
        if (failed_) return true;
        for (int s = 0; s < R; ++s)
          if (s != r && computing_[static_cast<size_t>(s)] &&
              version_ - on_[static_cast<size_t>(s)] > bound) {
            oldest = s;
            return false;
          }
        return true;
      };
      if (!changed_.wait_until(lock, deadline, may_start))
        throw TimeoutError(fmt::format(
            "parameter server {}: worker {} may not start its next step until worker {} (world "
            "rank {}) pushes (staleness bound {} global steps), which it did not within {:g} s",
            stats_.server, r, oldest, ps_.world_rank(oldest), config_.staleness, ps_.timeout_s()));
      if (failed_) return;
      on_[static_cast<size_t>(r)] = version_;
      computing_[static_cast<size_t>(r)] = true;
      out_[static_cast<size_t>(r)].resize(message_bytes(shard_));
      PullHeader ph{version_, skipped ? 1 : 0, norm, 0};
      std::memcpy(out_[static_cast<size_t>(r)].data(), &ph, sizeof ph);
      std::memcpy(out_[static_cast<size_t>(r)].data() + 32, params_.flat().f32(), bytes);
      lock.unlock();
      ps_.isend(out_[static_cast<size_t>(r)].data(), out_[static_cast<size_t>(r)].size(), r,
                kTagToWorker)
          ->wait(fmt::format("parameter server {}: sending parameters to worker {}", stats_.server,
                             r));
    }
  }

  Communicator& ps_;
  Communicator* servers_;
  PsConfig config_;
  PsShard shard_;
  Backend& backend_;
  SizeTable table_;
  Arena params_, grads_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<std::vector<std::byte>> out_;        // per worker: its reply (kept until sent)
  std::vector<std::vector<std::byte>> state_out_;  // per worker: its reply to FETCH
  int64_t step_ = 0;                               // optimizer steps' global step (sync)
  int64_t version_ = 0;                            // pushes applied
  PsServerStats stats_;
  // Asynchronous mode: what each worker computes on.
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<int64_t> on_;      // per worker: the version it pulled last
  std::vector<bool> computing_;  // per worker: between its pull and its next push
  bool failed_ = false;
  bool stopped_ = false;  // some worker sent STOP
  std::chrono::steady_clock::time_point first_push_;
};

}  // namespace

PsServerStats run_parameter_server(Communicator& ps, Communicator* servers, const PsConfig& config,
                                   const PsShard& shard, Backend& backend) {
  backend.bind_current_thread();
  Server server(ps, servers, config, shard, backend);
  return server.run();
}

// ---- the worker
// ----------------------------------------------------------------------------------

PsClient::PsClient(Communicator& ps, int worker, const PsConfig& config,
                   std::vector<PsShard> shards)
    : ps_(ps), worker_(worker), config_(config), shards_(std::move(shards)) {
  for (const PsShard& s : shards_) {
    out_.emplace_back(message_bytes(s));
    in_.emplace_back(message_bytes(s));
  }
}

PsClient::~PsClient() {
  if (!started_ || stopped_) return;
  try {
    const int R = config_.workers;
    std::vector<std::unique_ptr<CommRequest>> sent;
    for (size_t k = 0; k < shards_.size(); ++k) {
      PushHeader h{kStop, 0, version_, 0};
      std::memcpy(out_[k].data(), &h, sizeof h);
      sent.push_back(
          ps_.isend(out_[k].data(), out_[k].size(), R + static_cast<int>(k), kTagToServer));
    }
    for (auto& s : sent) s->wait("a worker's STOP to the parameter servers");
  } catch (const std::exception& e) {
    fmt::print(stderr, "worker {}: could not tell the parameter servers it stopped: {}\n", worker_,
               e.what());
  }
}

void PsClient::push(StageParameters& stage, int64_t kind, int64_t step) {
  const int R = config_.workers;
  const std::byte* src = reinterpret_cast<const std::byte*>(
      kind == kInit ? stage.params_flat().f32() : stage.grads_flat().f32());
  std::vector<std::unique_ptr<CommRequest>> sent;
  for (size_t k = 0; k < shards_.size(); ++k) {
    const PsShard& s = shards_[k];
    PushHeader h{kind, step, version_, 0};
    std::memcpy(out_[k].data(), &h, sizeof h);
    std::memcpy(out_[k].data() + 32, src + s.begin, s.end - s.begin);
    sent.push_back(
        ps_.isend(out_[k].data(), out_[k].size(), R + static_cast<int>(k), kTagToServer));
  }
  for (size_t k = 0; k < sent.size(); ++k)
    sent[k]->wait(fmt::format("worker {}: pushing to parameter server {}", worker_, k));
}

EpilogueResult PsClient::pull(StageParameters& stage) {
  const int R = config_.workers;
  std::byte* dst = reinterpret_cast<std::byte*>(stage.params_flat().f32());
  EpilogueResult out;
  for (size_t k = 0; k < shards_.size(); ++k) {
    const PsShard& s = shards_[k];
    // Two timeouts: a server waits up to one for the other workers (synchronous) or for the
    // staleness bound (asynchronous) before it replies, so when a worker is dead the server,
    // which knows which one, reports first and the job ends naming it.
    for (int attempt = 0;; ++attempt) {
      try {
        ps_.recv(
            in_[k].data(), in_[k].size(), R + static_cast<int>(k), kTagToWorker,
            fmt::format("worker {} waiting for parameters from parameter server {}", worker_, k));
        break;
      } catch (const TimeoutError&) {
        if (attempt == 1) throw;
        // Said now: another worker, meeting this one in a collective, may end the job first.
        fmt::print(stderr,
                   "warning: worker {}: parameter server {} (world rank {}) sent no parameters "
                   "within {:g} s; waiting once more (a server waits up to one timeout for the "
                   "other workers)\n",
                   worker_, k, ps_.world_rank(R + static_cast<int>(k)), ps_.timeout_s());
      }
    }
    PullHeader h;
    std::memcpy(&h, in_[k].data(), sizeof h);
    std::memcpy(dst + s.begin, in_[k].data() + 32, s.end - s.begin);
    if (k == 0) version_ = h.version;
    out.grad_norm = h.grad_norm;
    out.skipped = out.skipped || h.skipped != 0;
  }
  return out;
}

void PsClient::send_init(StageParameters& stage, const Optimizer& optimizer, int64_t step) {
  const int R = config_.workers;
  const auto* params = reinterpret_cast<const std::byte*>(stage.params_flat().f32());
  const size_t slots = optimizer.slots().size();
  std::vector<std::vector<std::byte>> out(shards_.size());
  std::vector<std::unique_ptr<CommRequest>> sent;
  for (size_t k = 0; k < shards_.size(); ++k) {
    const PsShard& s = shards_[k];
    const size_t bytes = s.end - s.begin;
    out[k].resize(state_message_bytes(s, static_cast<int>(slots)));
    PushHeader h{kInit, step, version_, optimizer.steps_taken()};
    std::memcpy(out[k].data(), &h, sizeof h);
    std::memcpy(out[k].data() + 32, params + s.begin, bytes);
    for (size_t i = 0; i < slots; ++i)
      std::memcpy(
          out[k].data() + 32 + bytes * (1 + i),
          reinterpret_cast<const std::byte*>(optimizer.slots()[i].state.flat().f32()) + s.begin,
          bytes);
    sent.push_back(ps_.isend(out[k].data(), out[k].size(), R + static_cast<int>(k), kTagToServer));
  }
  for (size_t k = 0; k < sent.size(); ++k)
    sent[k]->wait(fmt::format("worker {}: initialising parameter server {}", worker_, k));
}

bool PsClient::request_state() {
  if (!started_ || stopped_) return false;
  const int R = config_.workers;
  std::vector<std::unique_ptr<CommRequest>> sent;
  for (size_t k = 0; k < shards_.size(); ++k) {
    PushHeader h{kFetch, 0, version_, 0};
    std::memcpy(out_[k].data(), &h, sizeof h);
    sent.push_back(
        ps_.isend(out_[k].data(), out_[k].size(), R + static_cast<int>(k), kTagToServer));
  }
  for (auto& s : sent) s->wait("a worker's request for the parameter servers' state");
  return true;
}

void PsClient::receive_state(StageParameters& stage, Optimizer& optimizer) {
  const int R = config_.workers;
  auto* params = reinterpret_cast<std::byte*>(stage.params_flat().f32());
  const size_t slots = optimizer.slots().size();
  std::vector<std::byte> in;
  for (size_t k = 0; k < shards_.size(); ++k) {
    const PsShard& s = shards_[k];
    const size_t bytes = s.end - s.begin;
    in.resize(state_message_bytes(s, static_cast<int>(slots)));
    ps_.recv(in.data(), in.size(), R + static_cast<int>(k), kTagToWorker,
             fmt::format("worker {} waiting for the state of parameter server {}", worker_, k));
    PullHeader h;
    std::memcpy(&h, in.data(), sizeof h);
    std::memcpy(params + s.begin, in.data() + 32, bytes);
    for (size_t i = 0; i < slots; ++i)
      std::memcpy(reinterpret_cast<std::byte*>(optimizer.slots()[i].state.flat().f32()) + s.begin,
                  in.data() + 32 + bytes * (1 + i), bytes);
    // Every server steps once per update (synchronous) or push (asynchronous), skips included.
    if (k == 0) optimizer.set_steps_taken(h.optimizer_steps);
  }
  // Asynchronous: the server counted this worker as paused; its next step pulls afresh.
  if (config_.staleness > 0) paused_ = true;
}

void PsClient::before_step(StageParameters& stage, const Optimizer& optimizer, int64_t step) {
  if (!started_) {
    if (worker_ == 0) send_init(stage, optimizer, step);
    pull(stage);
    started_ = true;
  } else if (paused_) {
    push(stage, kResume, step);
    pull(stage);
  }
  paused_ = false;
}

void PsClient::pause() {
  if (!started_ || paused_ || config_.staleness == 0) return;
  const int R = config_.workers;
  std::vector<std::unique_ptr<CommRequest>> sent;
  for (size_t k = 0; k < shards_.size(); ++k) {
    PushHeader h{kPause, 0, version_, 0};
    std::memcpy(out_[k].data(), &h, sizeof h);
    sent.push_back(
        ps_.isend(out_[k].data(), out_[k].size(), R + static_cast<int>(k), kTagToServer));
  }
  for (auto& s : sent) s->wait("a worker's PAUSE to the parameter servers");
  paused_ = true;
}

EpilogueResult PsClient::exchange(StageParameters& stage, int64_t step) {
  push(stage, kPush, step);
  return pull(stage);
}

}  // namespace pt
