#pragma once
// How a pipeline tensor gets from one schedule device to another. The executor says only "send
// this to device d under this key" and "take what device d sent me under this key"; whether d is
// a device of this process (a copy into its memory, through its mailbox) or of another process
// (the pipeline communicator, with the key turned into a message tag) is the transport's business.
//
// The schedule's dependencies assume sends never block on their receiver (schedule/dependencies.h):
// every implementation buffers (a bounded mailbox, or a non-blocking send finished by flush()).
#include <chrono>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/comm/remote_transfer.h"
#include "engine/pipeline/mailbox.h"

namespace pt {

class Transport {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~Transport() = default;

  // Before a run of a schedule on `stages` stages and `microbatches` micro-batches: drops what an
  // earlier (failed) run left, and sizes the buffers for this one.
  virtual void start_run(int stages, int microbatches) = 0;
  // Delivers `value` (in device `from`'s memory) to device `to` under `key`. Returns false when
  // the receiver had no room before `deadline`.
  virtual bool send(int from, int to, const MessageKey& key, Tensor value,
                    Clock::time_point deadline) = 0;
  // Takes what device `from` sent to device `to` under `key`, in `to`'s memory; an undefined
  // Tensor when nothing came before `deadline`, or TimeoutError from a communicator whose peer
  // stopped answering.
  virtual Tensor receive(int from, int to, const MessageKey& key, Clock::time_point deadline) = 0;
  // Waits until everything device `from` sent in this run has left it (the end of its list).
  virtual void flush(int from, std::string_view what) = 0;
  // Wakes every waiter, so that it notices the abort flag after another device failed.
  virtual void wake_all() = 0;
};

// Devices of this process: the sender copies into the receiver's memory and puts it in the
// receiver's mailbox.
class InProcessTransport final : public Transport {
 public:
  // devices[d]: schedule device d when held here (nullptr otherwise); `skip_edges` and `abort`
  // size the mailboxes and end their waits when another device failed.
  InProcessTransport(std::vector<Backend*> devices, int skip_edges, const std::atomic<bool>* abort);
  void start_run(int stages, int microbatches) override;
  bool send(int from, int to, const MessageKey& key, Tensor value,
            Clock::time_point deadline) override;
  Tensor receive(int from, int to, const MessageKey& key, Clock::time_point deadline) override;
  void flush(int, std::string_view) override {}
  void wake_all() override;

 private:
  std::vector<Backend*> devices_;
  int skip_edges_;
  std::vector<std::unique_ptr<Mailbox>> mailboxes_;  // per held device
};

// Devices of other processes: the pipeline communicator (rank = schedule device), one message tag
// per key, the tensor's shape in a header (engine/comm/remote_transfer.h).
class ProcessTransport final : public Transport {
 public:
  ProcessTransport(Communicator& group, std::vector<Backend*> devices, int skip_edges);
  void start_run(int stages, int microbatches) override;
  bool send(int from, int to, const MessageKey& key, Tensor value,
            Clock::time_point deadline) override;
  Tensor receive(int from, int to, const MessageKey& key, Clock::time_point deadline) override;
  void flush(int from, std::string_view what) override;
  void wake_all() override {}

 private:
  int tag(const MessageKey& key) const;

  Communicator& group_;
  std::vector<Backend*> devices_;
  int skip_edges_, stages_ = 1;
  std::vector<std::vector<std::unique_ptr<PendingSend>>> pending_;  // per sending device
};

// Either of the two, by where the peer device is: devices[d] == nullptr means another process.
class RoutedTransport final : public Transport {
 public:
  RoutedTransport(std::vector<Backend*> devices, int skip_edges, const std::atomic<bool>* abort,
                  Communicator* pipeline_group);
  void start_run(int stages, int microbatches) override;
  bool send(int from, int to, const MessageKey& key, Tensor value,
            Clock::time_point deadline) override;
  Tensor receive(int from, int to, const MessageKey& key, Clock::time_point deadline) override;
  void flush(int from, std::string_view what) override;
  void wake_all() override;

 private:
  Transport& to_reach(int device);

  std::vector<Backend*> devices_;
  InProcessTransport local_;
  std::unique_ptr<ProcessTransport> remote_;  // null when every device is held here
};

}  // namespace pt
