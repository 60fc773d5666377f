#include "engine/parallel/parameter_server.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
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
// steps taken (INIT only), stop (PAUSE and STOP: this worker stops early, on a stop signal).
struct PushHeader {
  int64_t kind = 0, step = 0, version = 0, optimizer_steps = 0, stop = 0;
};
// Server -> worker: the version sent, skipped (0/1), the step's global norm, optimizer steps
// taken (the reply to FETCH only), stop (some worker or this server's process was asked to stop:
// training stops early; how a signal reaches asynchronous workers, which never meet per step).
struct PullHeader {
  int64_t version = 0, skipped = 0;
  double grad_norm = 0;
  int64_t optimizer_steps = 0, stop = 0;
};
// Every message is a header; the kinds that carry data (INIT, PUSH, every reply) follow it with
// one payload message on the same tag, which MPI (and the in-process group) deliver in order.
// A push's gradients and a pull's parameters then go straight from and into the arenas: no
// staging copy of the piece (16 MB for the Fashion-MNIST MLP) on either side of each push.
constexpr size_t kHeaderBytes = 40;
static_assert(sizeof(PushHeader) == kHeaderBytes && sizeof(PullHeader) == kHeaderBytes);
using HeaderBytes = std::array<std::byte, kHeaderBytes>;

// INIT and the reply to FETCH carry the optimizer state too: parameters, then each of `slots`
// optimizer slots, `bytes` each, at `begin` bytes into the arenas (a worker's stage holds the
// piece at its offset, a server's from 0). Without an optimizer the slots go as zeros.
size_t state_payload_bytes(size_t bytes, size_t slots) { return bytes * (1 + slots); }
void pack_state(std::vector<std::byte>& out, const Tensor& params, const Optimizer* optimizer,
                size_t slots, size_t begin, size_t bytes) {
  out.resize(state_payload_bytes(bytes, slots));
  const auto from = [&](const Tensor& t) {
    return static_cast<const std::byte*>(t.data()) + begin;
  };
  std::memcpy(out.data(), from(params), bytes);
  if (!optimizer) {
    std::fill(out.begin() + static_cast<std::ptrdiff_t>(bytes), out.end(), std::byte{0});
    return;
  }
  for (size_t i = 0; i < slots; ++i)
    std::memcpy(out.data() + bytes * (1 + i), from(optimizer->slots()[i].state.flat()), bytes);
}
void unpack_state(const std::vector<std::byte>& in, const Tensor& params, Optimizer& optimizer,
                  size_t begin, size_t bytes) {
  const auto to = [&](const Tensor& t) { return static_cast<std::byte*>(t.data()) + begin; };
  std::memcpy(to(params), in.data(), bytes);
  for (size_t i = 0; i < optimizer.slots().size(); ++i)
    std::memcpy(to(optimizer.slots()[i].state.flat()), in.data() + bytes * (1 + i), bytes);
}
template <class Header>
Header read_header(const HeaderBytes& bytes) {
  Header h;
  std::memcpy(&h, bytes.data(), sizeof h);
  return h;
}
template <class Header>
Header receive_header(Communicator& c, int from, int tag, std::string_view what) {
  HeaderBytes bytes;
  c.recv(bytes.data(), bytes.size(), from, tag, what);
  return read_header<Header>(bytes);
}

// Messages posted at once and waited for together, as every sender here does: each keeps its
// header until the wait, and remembers whom it names in an error (a worker's rank, a server).
class Sends {
 public:
  explicit Sends(Communicator& c) : c_(c) {}

  // A header and, when `bytes` > 0, its payload (sent from `payload` itself, which must not
  // change until wait()).
  template <class Header>
  void message(int to, int tag, const Header& header, int named, const void* payload = nullptr,
               size_t bytes = 0) {
    HeaderBytes& out = headers_.emplace_back();
    std::memcpy(out.data(), &header, sizeof header);
    requests_.push_back(c_.isend(out.data(), out.size(), to, tag));
    named_.push_back(named);
    if (bytes == 0) return;
    requests_.push_back(c_.isend(payload, bytes, to, tag));
    named_.push_back(named);
  }

  // `what(named)` describes a wait that timed out.
  template <class What>
  void wait(const What& what) {
    for (size_t i = 0; i < requests_.size(); ++i) requests_[i]->wait(what(named_[i]));
  }

 private:
  Communicator& c_;
  std::deque<HeaderBytes> headers_;  // a deque: posted headers never move
  std::vector<std::unique_ptr<CommRequest>> requests_;
  std::vector<int> named_;
};

// Layers [first, last) laid out as StageParameters lays out a stage: the table, and per layer
// (relative to `first`, plus one past the end) the index of its first entry.
struct StageTable {
  SizeTable table;
  std::vector<size_t> layer_first_entry;
  StageTable(const Model& model, int first, int last) {
    for (int l = first; l < last; ++l) {
      layer_first_entry.push_back(table.entries().size());
      for (const auto& spec : model.layer(l).param_specs()) table.add(spec.name, spec.shape);
    }
    layer_first_entry.push_back(table.entries().size());
  }
  // Byte offset of layer l's first tensor (relative index), or the total past the last one.
  size_t begin(size_t l) const {
    const size_t e = layer_first_entry[l];
    return e < table.entries().size() ? table.entries()[e].offset : table.total_bytes();
  }
};

}  // namespace

// ---- sharding ----------------------------------------------------------------------------------

std::vector<PsShard> shard_by_layer(const Model& model, int servers,
                                    const std::vector<int>& layers_per_stage) {
  if (servers < 1) throw UsageError(fmt::format("--ps {} must be >= 1", servers));
  if (!model.ties().empty())
    throw UsageError(
        "--ps does not support tied parameters (their gradients are summed across layers, and "
        "across stages, before the update): untie them (pipetrain-gpt: --untied) or train this "
        "model with --dp instead");
  // The arena of the whole model as one stage: where the cuts are balanced (the same cuts for
  // every S, so a server holds the same layers whatever the stages).
  const StageTable whole(model, 0, model.num_layers());
  const size_t total = whole.table.total_bytes();
  const auto layer_begin = [&](int l) { return whole.begin(static_cast<size_t>(l)); };
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
  // Stage boundaries (one stage when none are given).
  std::vector<int> stage_first{0};
  for (int n : layers_per_stage) stage_first.push_back(stage_first.back() + n);
  if (layers_per_stage.empty()) stage_first.push_back(model.num_layers());
  if (stage_first.back() != model.num_layers())
    throw std::logic_error("shard_by_layer: the stages do not cover the model");
  std::vector<StageTable> stages;
  for (size_t s = 0; s + 1 < stage_first.size(); ++s)
    stages.emplace_back(model, stage_first[s], stage_first[s + 1]);
  std::vector<PsShard> out;
  size_t global = 0;
  for (int k = 0; k < servers; ++k) {
    PsShard sh;
    sh.first_layer = cut[static_cast<size_t>(k)];
    sh.last_layer = cut[static_cast<size_t>(k) + 1];
    sh.begin = layer_begin(sh.first_layer);
    sh.end = k + 1 < servers ? layer_begin(sh.last_layer) : total;
    const size_t first_global = global;
    for (size_t e = whole.layer_first_entry[static_cast<size_t>(sh.first_layer)];
         e < whole.layer_first_entry[static_cast<size_t>(sh.last_layer)]; ++e, ++global) {
      const SizeTableEntry& te = whole.table.entries()[e];
      sh.tensors.push_back({te.offset - sh.begin, te.shape.numel(), global});
    }
    // The same layers, cut at the stage boundaries: offsets in each stage's own arena.
    size_t g = first_global;
    for (size_t s = 0; s < stages.size(); ++s) {
      const int f = std::max(sh.first_layer, stage_first[s]);
      const int l = std::min(sh.last_layer, stage_first[s + 1]);
      if (f >= l) continue;
      const StageTable& st = stages[s];
      const auto rel = [&](int layer) { return static_cast<size_t>(layer - stage_first[s]); };
      PsPiece p;
      p.stage = static_cast<int>(s);
      p.begin = st.begin(rel(f));
      // The last layer of the stage ends at the stage's (aligned) total, as the last shard does.
      p.end = l == stage_first[s + 1] ? st.table.total_bytes() : st.begin(rel(l));
      for (size_t e = st.layer_first_entry[rel(f)]; e < st.layer_first_entry[rel(l)]; ++e, ++g) {
        const SizeTableEntry& te = st.table.entries()[e];
        p.tensors.push_back({te.offset - p.begin, te.shape.numel(), g});
      }
      if (p.end > p.begin) sh.pieces.push_back(std::move(p));
    }
    out.push_back(std::move(sh));
  }
  return out;
}

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

// ---- the server
// ----------------------------------------------------------------------------------

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
    for (auto& p : pieces_) {
      const std::string what = fmt::format(
          "parameter server {} waiting for the initial parameters of stage {} from replica 0",
          stats_.server, p->shape.stage);
      const auto h = receive_header<PushHeader>(ps_, worker_rank(0, *p), kTagToServer, what);
      if (h.kind != kInit)
        throw std::runtime_error("parameter server: expected INIT from replica 0");
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
    std::vector<std::vector<std::byte>> state_out;  // per replica: its reply to FETCH
  };

  int worker_rank(int r, const Piece& p) const { return r * config_.stages + p.shape.stage; }

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
  // of piece p's stage (called under the lock when asynchronous).
  void send_state(Piece& p, int r) {
    std::vector<std::byte>& out = p.state_out[static_cast<size_t>(r)];
    pack_state(out, p.params.flat(), p.optimizer.get(), static_cast<size_t>(slots()), 0,
               p.shape.bytes());
    Sends sends(ps_);
    const int to = worker_rank(r, p);
    sends.message(to, kTagToWorker, PullHeader{p.version, 0, 0.0, p.optimizer->steps_taken()}, to,
                  out.data(), out.size());
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
    for (;;) {
      const auto h = receive_header<PushHeader>(ps_, worker_rank(r, p), kTagToServer, what(r, p));
      if (h.kind == kPush)
        ps_.recv(grads.flat().f32(), bytes, worker_rank(r, p), kTagToServer, what(r, p));
      std::unique_lock lock(mutex_);
      p.computing[ri] = false;
      if (h.kind == kFetch) {  // a save: the worker pauses (its next message is RESUME)
        changed_.notify_all();
        send_state(p, r);
        continue;
      }
      if (h.kind == kStop || h.kind == kPause) {
        if (h.kind == kStop) count(true);
        note_stop(h);
        changed_.notify_all();
        if (h.kind == kStop) return;
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
              "parameter server {}: a reply to a worker of stage {} was not received within {:g} "
              "s, and worker {}'s push waits for it",
              stats_.server, p.shape.stage, ps_.timeout_s(), worker_rank(r, p)));
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
      lock.unlock();
      Sends sends(ps_);
      const int to = worker_rank(r, p);
      sends.message(to, kTagToWorker, reply, to, p.params.flat().f32(), bytes);
      sends.wait([&](int) { return sending_parameters(to); });
      lock.lock();
      --p.sending;
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

PsServerStats run_parameter_server(Communicator& ps, Communicator* servers, const PsConfig& config,
                                   const PsShard& shard, Backend& backend,
                                   std::function<bool()> stop_signal) {
  backend.bind_current_thread();
  Server server(ps, servers, config, shard, backend, std::move(stop_signal));
  return server.run();
}

// ---- the worker
// ----------------------------------------------------------------------------------

PsClient::PsClient(Communicator& ps, int worker, const PsConfig& config,
                   std::vector<PsShard> shards)
    : ps_(ps), worker_(worker), config_(config) {
  for (size_t k = 0; k < shards.size(); ++k)
    if (const PsPiece* p = shards[k].piece(stage())) {
      servers_.push_back(static_cast<int>(k));
      pieces_.push_back(*p);
    }
}

int PsClient::server_rank(size_t contact) const {
  return config_.workers * config_.stages + servers_[contact];
}

PsClient::~PsClient() {
  if (!started_ || stopped_) return;
  try {
    tell_servers(kStop, "a worker's STOP to the parameter servers");
  } catch (const std::exception& e) {
    fmt::print(stderr, "worker {}: could not tell the parameter servers it stopped: {}\n", worker_,
               e.what());
  }
}

void PsClient::tell_servers(int64_t kind, const char* what) {
  Sends sends(ps_);
  for (size_t k = 0; k < pieces_.size(); ++k)
    sends.message(server_rank(k), kTagToServer, PushHeader{kind, 0, version_, 0, stopping_ ? 1 : 0},
                  servers_[k]);
  sends.wait([&](int) { return std::string(what); });
}

// PUSH: the header, then the gradients straight from the arena; RESUME: the header alone.
void PsClient::push(StageParameters& stage, int64_t kind, int64_t step) {
  const auto* grads = reinterpret_cast<const std::byte*>(stage.grads_flat().f32());
  Sends sends(ps_);
  for (size_t k = 0; k < pieces_.size(); ++k) {
    const PsPiece& p = pieces_[k];
    sends.message(server_rank(k), kTagToServer, PushHeader{kind, step, version_, 0}, servers_[k],
                  grads + p.begin, kind == kPush ? p.bytes() : 0);
  }
  sends.wait([&](int server) {
    return fmt::format("worker {}: pushing to parameter server {}", worker_, server);
  });
}

EpilogueResult PsClient::finish_pull(StageParameters& stage) {
  std::byte* dst = reinterpret_cast<std::byte*>(stage.params_flat().f32());
  EpilogueResult out;
  for (size_t k = 0; k < pieces_.size(); ++k) {
    const PsPiece& p = pieces_[k];
    const int server = servers_[k];
    // Two timeouts: a server waits up to one for the other workers (synchronous) or for the
    // staleness bound (asynchronous) before it replies, so when a worker is dead the server,
    // which knows which one, reports first and the job ends naming it.
    PullHeader h;
    for (int attempt = 0;; ++attempt) {
      try {
        h = receive_header<PullHeader>(
            ps_, server_rank(k), kTagToWorker,
            fmt::format("worker {} waiting for parameters from parameter server {}", worker_,
                        server));
        break;
      } catch (const TimeoutError&) {
        if (attempt == 1) throw;
        // Said now: another worker, meeting this one in a collective, may end the job first.
        fmt::print(stderr,
                   "warning: worker {}: parameter server {} (world rank {}) sent no parameters "
                   "within {:g} s; waiting once more (a server waits up to one timeout for the "
                   "other workers)\n",
                   worker_, server, ps_.world_rank(server_rank(k)), ps_.timeout_s());
      }
    }
    // The parameters follow their header, straight into the arena.
    ps_.recv(
        dst + p.begin, p.bytes(), server_rank(k), kTagToWorker,
        fmt::format("worker {} receiving parameters from parameter server {}", worker_, server));
    if (k == 0) version_ = h.version;
    stop_asked_ = stop_asked_ || h.stop != 0;
    out.grad_norm = h.grad_norm;
    out.skipped = out.skipped || h.skipped != 0;
  }
  started_ = true;
  paused_ = false;
  return out;
}

void PsClient::send_init(StageParameters& stage, const Optimizer* optimizer, int64_t step) {
  // Without an optimizer the slots go as zeros (a fresh start).
  const size_t slots = static_cast<size_t>(config_.optimizer.state_slots());
  if (optimizer && optimizer->slots().size() != slots)
    throw std::logic_error("a parameter-server worker's optimizer has another number of slots");
  std::vector<std::vector<std::byte>> out(pieces_.size());
  Sends sends(ps_);
  for (size_t k = 0; k < pieces_.size(); ++k) {
    const PsPiece& p = pieces_[k];
    pack_state(out[k], stage.params_flat(), optimizer, slots, p.begin, p.bytes());
    sends.message(server_rank(k), kTagToServer,
                  PushHeader{kInit, step, version_, optimizer ? optimizer->steps_taken() : 0},
                  servers_[k], out[k].data(), out[k].size());
  }
  sends.wait([&](int server) {
    return fmt::format("worker {}: initialising parameter server {}", worker_, server);
  });
}

bool PsClient::request_state() {
  if (!started_ || stopped_) return false;
  tell_servers(kFetch, "a worker's request for the parameter servers' state");
  return true;
}

void PsClient::receive_state(StageParameters& stage, Optimizer& optimizer) {
  std::vector<std::byte> in;
  for (size_t k = 0; k < pieces_.size(); ++k) {
    const PsPiece& p = pieces_[k];
    in.resize(state_payload_bytes(p.bytes(), optimizer.slots().size()));
    const std::string what =
        fmt::format("worker {} waiting for the state of parameter server {}", worker_, servers_[k]);
    const auto h = receive_header<PullHeader>(ps_, server_rank(k), kTagToWorker, what);
    ps_.recv(in.data(), in.size(), server_rank(k), kTagToWorker, what);
    unpack_state(in, stage.params_flat(), optimizer, p.begin, p.bytes());
    // Every server steps once per update (synchronous) or push (asynchronous), skips included.
    if (k == 0) optimizer.set_steps_taken(h.optimizer_steps);
  }
  // Asynchronous: the server counted this worker as paused; its next step pulls afresh.
  if (config_.staleness > 0) paused_ = true;
}

bool PsClient::begin_step(StageParameters& stage, const Optimizer* optimizer, int64_t step) {
  if (!started_) {
    if (replica() == 0) send_init(stage, optimizer, step);
    return true;
  }
  if (paused_) {
    push(stage, kResume, step);
    return true;
  }
  return false;
}

void PsClient::pause() {
  if (!started_ || paused_ || config_.staleness == 0) return;
  tell_servers(kPause, "a worker's PAUSE to the parameter servers");
  paused_ = true;
}

void PsClient::announce_stop() {
  stopping_ = true;
  if (!started_ || stopped_ || config_.staleness == 0) return;
  // A PAUSE that says why (stopping_ is set): the servers tell every other worker in its next
  // reply. Sent even when already paused (after a save or an evaluation): a server takes a second
  // PAUSE as the first.
  tell_servers(kPause, "a worker's stop to the parameter servers");
  paused_ = true;
}

void PsClient::push_gradients(StageParameters& stage, int64_t step) { push(stage, kPush, step); }

}  // namespace pt
