#pragma once
// The parameter server's messages (parameter_server.h draws the exchange): their kinds and tags,
// the headers, the state payload of INIT and FETCH, and the batch of sends every sender waits for.
// Shared by the server (ps_server.h) and its client (ps_client.cpp), so both read one layout.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string_view>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "engine/optim/optimizer.h"

namespace pt::ps_detail {

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
inline size_t state_payload_bytes(size_t bytes, size_t slots) { return bytes * (1 + slots); }
inline void pack_state(std::vector<std::byte>& out, const Tensor& params,
                       const Optimizer* optimizer, size_t slots, size_t begin, size_t bytes) {
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
inline void unpack_state(const std::vector<std::byte>& in, const Tensor& params,
                         Optimizer& optimizer, size_t begin, size_t bytes) {
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
// Waits up to `timeouts` times the group's timeout, quietly between them: where another rank's
// wait may explain this one (a server waiting for another worker before it replies, a paused
// worker waiting for the others), that rank, which knows who stalled, reports first.
template <class Header>
Header receive_header(Communicator& c, int from, int tag, std::string_view what, int timeouts = 1) {
  HeaderBytes bytes;
  for (int attempt = 1;; ++attempt) {
    try {
      c.recv(bytes.data(), bytes.size(), from, tag, what);
      return read_header<Header>(bytes);
    } catch (const TimeoutError&) {
      if (attempt >= timeouts) throw;
    }
  }
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

}  // namespace pt::ps_detail
