#pragma once
// The flight recorder: every process keeps its last N executed actions and communication calls
// in a fixed ring, so that after a hang, a timeout or an abort the job can say where each rank
// stood (engine/trace/flight_record_file.h writes and reads the record; the tool pipetrain-hang
// merges the records of all ranks).
//
// Recording is cheap enough to be always on: the ring is allocated once; begin() claims a slot
// with one atomic increment and writes the event with relaxed atomic stores (plain moves on x86);
// finish() sets the end time and state. No locks, no allocation. Any thread may record (device
// threads, the gradient-reduction thread) and any thread may take a snapshot() meanwhile: each
// slot carries a sequence number written last (a seqlock), so a reader skips a slot that is being
// rewritten instead of reporting half of two events.
//
// Beside the ring, the recorder keeps what the events refer to by number: the communicator groups
// (name and world ranks) and each device's action lists. Those change rarely (a split, a new
// schedule) and are guarded by a mutex.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/core/error.h"

namespace pt {

enum class FlightKind : uint8_t { action, send, recv, collective };
enum class FlightState : uint8_t { started, finished, timed_out, failed };
// The communication call of a send/recv/collective event.
enum class CommOp : uint8_t {
  isend,
  recv,
  all_reduce,
  reduce_scatter,
  all_gather,
  broadcast,
  barrier,
  split
};

std::string_view flight_kind_name(FlightKind k);
std::string_view flight_state_name(FlightState s);
std::string_view comm_op_name(CommOp op);

// The action lists an action event indexes into.
enum class FlightList : uint8_t { training = 0, evaluation = 1 };

// One recorded event: plain data.
struct FlightEvent {
  uint64_t seq = 0;  // order of begin() in this process (0, 1, ...)
  FlightKind kind = FlightKind::action;
  FlightState state = FlightState::started;
  uint8_t op = 0;                          // action: sched::ActionType; otherwise CommOp
  FlightList list = FlightList::training;  // action: which list `index` is in
  int device = -1;                   // action: replica * devices per replica + schedule device
  int stage = -1, microbatch = -1;   // action
  int index = -1;                    // action: position in the device's list
  int group = -1;                    // communication: FlightRecorder::group() number
  int peer = -1;                     // send/recv: the peer's world rank
  int tag = -1;                      // send/recv
  int64_t bytes = 0;                 // communication: payload bytes
  int64_t run = 0;                   // schedule runs (steps, evaluations) started before it
  int64_t step = 0;                  // the optimizer step the run belongs to
  int64_t start_ns = 0, end_ns = 0;  // steady clock; end_ns = 0 while started
};

// A communicator group as the events name it.
struct FlightGroup {
  std::string name;              // the same on every member ("pipeline of replica 1")
  std::vector<int> world_ranks;  // of its members, in group rank order
};

// One device's action list, as text (sched::Action::str()).
struct FlightActionList {
  FlightList list = FlightList::training;
  int device = -1;    // as FlightEvent::device
  std::string label;  // "replica 1 device 0 (cpu:0)"
  std::vector<std::string> actions;
};

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  size_t capacity() const { return capacity_; }
  // Off: begin() records nothing and returns 0 (to measure what recording costs).
  void set_enabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  // Records the start of `e` (its seq, run, step and start time are filled in here) and returns
  // a ticket for finish(); 0 when disabled.
  uint64_t begin(const FlightEvent& e);
  // Ends the event of `ticket` (ignored when 0, or when the slot was reused by N newer events).
  void finish(uint64_t ticket, FlightState state);
  // Runs `call` as one event: finished, timed out (TimeoutError) or failed (anything else).
  template <typename Call>
  void record(const FlightEvent& e, Call&& call) {
    const uint64_t ticket = begin(e);
    try {
      call();
    } catch (const TimeoutError&) {
      finish(ticket, FlightState::timed_out);
      throw;
    } catch (...) {
      finish(ticket, FlightState::failed);
      throw;
    }
    finish(ticket, FlightState::finished);
  }

  // The events still in the ring, oldest first (a slot being written at this moment is skipped).
  std::vector<FlightEvent> snapshot() const;

  // Which run and step the events recorded from now on belong to (set at each schedule run).
  void set_run(int64_t run, int64_t step);

  // ---- what events refer to by number (not on the hot path: under a mutex) -------------------
  // The number of a group (the same name and ranks give the same number).
  int group(const std::string& name, const std::vector<int>& world_ranks);
  std::vector<FlightGroup> groups() const;
  // Sets (or replaces) the list of (list, device).
  void set_action_list(FlightActionList l);
  std::vector<FlightActionList> action_lists() const;

 private:
  struct Slot;
  size_t capacity_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<uint64_t> next_{0};
  std::atomic<bool> enabled_{true};
  std::atomic<int64_t> run_{0}, step_{0};
  mutable std::mutex mutex_;  // the two below
  std::vector<FlightGroup> groups_;
  std::vector<FlightActionList> lists_;
};

// The process's recorder (4096 events), created on first use.
FlightRecorder& flight_recorder();

// Nanoseconds of the steady clock (the events' time base).
int64_t flight_now_ns();

}  // namespace pt
