#include "engine/pipeline/transport.h"

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

namespace {
size_t at(int device) { return static_cast<size_t>(device); }
}  // namespace

// ---- same process: copy + mailbox ------------------------------------------------------------

InProcessTransport::InProcessTransport(std::vector<Backend*> devices, int skip_edges,
                                       const std::atomic<bool>* abort)
    : devices_(std::move(devices)), skip_edges_(skip_edges) {
  for (Backend* b : devices_)
    mailboxes_.push_back(b ? std::make_unique<Mailbox>(1, abort) : nullptr);
}

void InProcessTransport::start_run(int stages, int microbatches) {
  // Room for every message a device can receive in one run (an activation and a gradient per
  // stage, skip edge and micro-batch): a valid schedule never blocks a sender, while the bound
  // still catches a runaway one.
  const size_t capacity =
      2 * static_cast<size_t>(stages + skip_edges_) * static_cast<size_t>(microbatches) + 2;
  for (auto& mb : mailboxes_)
    if (mb) mb->reset(capacity);
}

bool InProcessTransport::send(int from, int to, const MessageKey& key, Tensor value,
                              Clock::time_point deadline) {
  return mailboxes_.at(at(to))->put(
      key, devices_.at(at(from))->copy_to(*devices_.at(at(to)), value), deadline);
}

Tensor InProcessTransport::receive(int, int to, const MessageKey& key, Clock::time_point deadline) {
  return mailboxes_.at(at(to))->take(key, deadline);
}

void InProcessTransport::wake_all() {
  for (auto& mb : mailboxes_)
    if (mb) mb->notify_all();
}

// ---- other processes: communicator + tags ----------------------------------------------------

ProcessTransport::ProcessTransport(Communicator& group, std::vector<Backend*> devices,
                                   int skip_edges)
    : group_(group),
      devices_(std::move(devices)),
      skip_edges_(skip_edges),
      pending_(devices_.size()) {}

void ProcessTransport::start_run(int stages, int) {
  stages_ = stages;
  for (auto& p : pending_) p.clear();
}

// Channel 0 is the stage's input/output, 1 + k skip edge k: each (micro-batch, channel) pair gets
// its own index, so every message of a run has its own tag.
int ProcessTransport::tag(const MessageKey& key) const {
  const int index = key.microbatch * (1 + skip_edges_) + key.channel;
  return transfer_tag(
      key.direction == Direction::forward ? TransferKind::activation : TransferKind::gradient,
      key.stage, index, stages_, group_);
}

bool ProcessTransport::send(int from, int to, const MessageKey& key, Tensor value,
                            Clock::time_point) {
  devices_.at(at(from))->synchronize();  // the communicator reads the memory from another stream
  pending_.at(at(from)).push_back(send_tensor(group_, to, tag(key), std::move(value)));
  return true;
}

Tensor ProcessTransport::receive(int from, int to, const MessageKey& key, Clock::time_point) {
  // The communicator's own deadline is the run's timeout (it was created with it); it throws
  // TimeoutError, which the executor reports as any other wait that ran out.
  return recv_tensor(group_, *devices_.at(at(to)), from, tag(key),
                     fmt::format("stage {} micro-batch {} from device {} (world rank {})",
                                 key.stage, key.microbatch, from, group_.world_rank(from)));
}

void ProcessTransport::flush(int from, std::string_view what) {
  for (auto& p : pending_.at(at(from))) p->wait(what);
  pending_.at(at(from)).clear();
}

// ---- routing ---------------------------------------------------------------------------------

RoutedTransport::RoutedTransport(std::vector<Backend*> devices, int skip_edges,
                                 const std::atomic<bool>* abort, Communicator* pipeline_group)
    : devices_(devices), local_(devices, skip_edges, abort) {
  if (pipeline_group)
    remote_ = std::make_unique<ProcessTransport>(*pipeline_group, devices, skip_edges);
}

Transport& RoutedTransport::to_reach(int device) {
  if (devices_.at(at(device))) return local_;
  if (!remote_)
    throw std::logic_error(fmt::format(
        "device {} is in another process but there is no pipeline communicator", device));
  return *remote_;
}

void RoutedTransport::start_run(int stages, int microbatches) {
  local_.start_run(stages, microbatches);
  if (remote_) remote_->start_run(stages, microbatches);
}

bool RoutedTransport::send(int from, int to, const MessageKey& key, Tensor value,
                           Clock::time_point deadline) {
  return to_reach(to).send(from, to, key, std::move(value), deadline);
}

Tensor RoutedTransport::receive(int from, int to, const MessageKey& key,
                                Clock::time_point deadline) {
  return to_reach(from).receive(from, to, key, deadline);
}

void RoutedTransport::flush(int from, std::string_view what) {
  local_.flush(from, what);
  if (remote_) remote_->flush(from, what);
}

void RoutedTransport::wake_all() {
  local_.wake_all();
  if (remote_) remote_->wake_all();
}

}  // namespace pt
