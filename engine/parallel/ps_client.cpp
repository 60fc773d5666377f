// A parameter-server worker's side (PsClient, see parameter_server.h): INIT from replica 0,
// then per step a push of its stage's gradients and a pull of fresh parameters, FETCH for a save,
// PAUSE, RESUME and STOP, each to the servers holding its stage's layers.
#include "engine/parallel/parameter_server.h"

#include <cstddef>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/parallel/ps_protocol.h"

namespace pt {

using ps_detail::kFetch;
using ps_detail::kInit;
using ps_detail::kPause;
using ps_detail::kPush;
using ps_detail::kResume;
using ps_detail::kStop;
using ps_detail::kTagToServer;
using ps_detail::kTagToWorker;
using ps_detail::pack_state;
using ps_detail::PullHeader;
using ps_detail::PushHeader;
using ps_detail::receive_header;
using ps_detail::Sends;
using ps_detail::state_payload_bytes;
using ps_detail::unpack_state;

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
  // Sent even by a worker that never started: a resumed checkpoint already at the last step
  // trains nothing, and the servers, still waiting for replica 0's INIT, learn from this STOP
  // that there is nothing to serve (else they would wait a whole --timeout and fail).
  if (stopped_) return;
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

PullHeader PsClient::receive_reply(size_t k, const std::string& what) {
  // Two timeouts: a server waits up to one for the other workers (synchronous), for the
  // staleness bound (asynchronous) or for a reply to a stalled worker to be taken before it
  // replies to this one, so when a worker is dead or stopped the server, which knows which one,
  // reports first and the job ends naming it, not the server (issue 37: a worker SIGSTOPped at a
  // save made the other worker's wait for its FETCH reply blame the healthy server).
  return receive_header<PullHeader>(ps_, server_rank(k), kTagToWorker, what, 2);
}

EpilogueResult PsClient::finish_pull(StageParameters& stage) {
  std::byte* dst = reinterpret_cast<std::byte*>(stage.params_flat().f32());
  EpilogueResult out;
  for (size_t k = 0; k < pieces_.size(); ++k) {
    const PsPiece& p = pieces_[k];
    const int server = servers_[k];
    const PullHeader h = receive_reply(
        k, fmt::format("worker {} waiting for parameters from parameter server {} (two timeouts)",
                       worker_, server));
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
    const PullHeader h = receive_reply(k, what + " (two timeouts)");
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
