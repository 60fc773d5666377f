#include "engine/trace/flight_recorder.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <thread>

namespace pt {

std::string_view flight_kind_name(FlightKind k) {
  switch (k) {
    case FlightKind::action: return "action";
    case FlightKind::send: return "send";
    case FlightKind::recv: return "recv";
    case FlightKind::collective: return "collective";
  }
  return "?";
}

std::string_view flight_state_name(FlightState s) {
  switch (s) {
    case FlightState::started: return "started";
    case FlightState::finished: return "finished";
    case FlightState::timed_out: return "timed_out";
    case FlightState::failed: return "failed";
  }
  return "?";
}

std::string_view comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::isend: return "isend";
    case CommOp::recv: return "recv";
    case CommOp::all_reduce: return "all_reduce";
    case CommOp::reduce_scatter: return "reduce_scatter";
    case CommOp::all_gather: return "all_gather";
    case CommOp::broadcast: return "broadcast";
    case CommOp::barrier: return "barrier";
    case CommOp::split: return "split";
  }
  return "?";
}

namespace {

constexpr auto relaxed = std::memory_order_relaxed;

// Sequence numbers of a slot: odd while event i is written, even once it is complete, so a
// reader can tell a finished slot from one in the middle of a write.
constexpr uint64_t writing(uint64_t i) { return 2 * i + 1; }
constexpr uint64_t written(uint64_t i) { return 2 * i + 2; }

uint64_t pair(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
int32_t high(uint64_t w) { return static_cast<int32_t>(static_cast<uint32_t>(w >> 32)); }
int32_t low(uint64_t w) { return static_cast<int32_t>(static_cast<uint32_t>(w)); }

}  // namespace

// One event as atomic words (so concurrent writers and readers are well defined, and cost plain
// moves on x86): kind/op/list + device, stage + microbatch, index + group, peer + tag, bytes, run,
// step, start, end, state.
struct FlightRecorder::Slot {
  std::atomic<uint64_t> seq{0};  // 0: never written
  std::atomic<uint64_t> w[9]{};
  std::atomic<uint8_t> state{0};
};

FlightRecorder::FlightRecorder(size_t capacity)
    : capacity_(capacity), slots_(std::make_unique<Slot[]>(capacity)) {
  if (capacity == 0) throw std::invalid_argument("FlightRecorder: capacity must be >= 1");
}

FlightRecorder::~FlightRecorder() = default;

uint64_t FlightRecorder::begin(const FlightEvent& e) {
  if (!enabled_.load(relaxed)) return 0;
  const uint64_t i = next_.fetch_add(1, relaxed);
  Slot& s = slots_[i % capacity_];
  // Claim the slot. Another thread holds it only in the rare case that it writes event i - N (or
  // finishes it) at this very moment: wait for that write to end. A writer delayed so long that
  // event i + N is already there leaves the newer event in place (the slot's events only grow).
  uint64_t seen = s.seq.load(relaxed);
  for (;;) {
    if (seen & 1) {
      std::this_thread::yield();
      seen = s.seq.load(relaxed);
      continue;
    }
    if (seen > written(i)) return i + 1;  // finish() will find the slot taken and do nothing
    if (s.seq.compare_exchange_weak(seen, writing(i), std::memory_order_acquire, relaxed)) break;
  }
  const uint64_t head = static_cast<uint64_t>(e.kind) | static_cast<uint64_t>(e.op) << 8 |
                        static_cast<uint64_t>(e.list) << 16;
  s.w[0].store(pair(static_cast<int32_t>(head), e.device), relaxed);
  s.w[1].store(pair(e.stage, e.microbatch), relaxed);
  s.w[2].store(pair(e.index, e.group), relaxed);
  s.w[3].store(pair(e.peer, e.tag), relaxed);
  s.w[4].store(static_cast<uint64_t>(e.bytes), relaxed);
  s.w[5].store(static_cast<uint64_t>(run_.load(relaxed)), relaxed);
  s.w[6].store(static_cast<uint64_t>(step_.load(relaxed)), relaxed);
  s.w[7].store(static_cast<uint64_t>(flight_now_ns()), relaxed);
  s.w[8].store(0, relaxed);
  s.state.store(static_cast<uint8_t>(FlightState::started), relaxed);
  s.seq.store(written(i), std::memory_order_release);
  return i + 1;
}

void FlightRecorder::finish(uint64_t ticket, FlightState state) {
  if (ticket == 0) return;
  const uint64_t i = ticket - 1;
  Slot& s = slots_[i % capacity_];
  uint64_t expected = written(i);
  // Fails when N newer events reused the slot: the event is gone from the ring anyway.
  if (!s.seq.compare_exchange_strong(expected, writing(i), std::memory_order_acquire, relaxed))
    return;
  s.w[8].store(static_cast<uint64_t>(flight_now_ns()), relaxed);
  s.state.store(static_cast<uint8_t>(state), relaxed);
  s.seq.store(written(i), std::memory_order_release);
}

std::vector<FlightEvent> FlightRecorder::snapshot() const {
  std::vector<FlightEvent> out;
  out.reserve(capacity_);
  for (size_t k = 0; k < capacity_; ++k) {
    const Slot& s = slots_[k];
    const uint64_t before = s.seq.load(std::memory_order_acquire);
    if (before == 0 || (before & 1)) continue;
    // Acquire loads (plain moves on x86) keep the second look at seq after them; a fence would
    // do the same, but TSan does not understand fences.
    uint64_t w[9];
    for (int j = 0; j < 9; ++j) w[j] = s.w[j].load(std::memory_order_acquire);
    const auto state = static_cast<FlightState>(s.state.load(std::memory_order_acquire));
    if (s.seq.load(relaxed) != before) continue;  // rewritten while we read it
    FlightEvent e;
    e.seq = before / 2 - 1;
    const auto head = static_cast<uint32_t>(high(w[0]));
    e.kind = static_cast<FlightKind>(head & 0xff);
    e.op = static_cast<uint8_t>((head >> 8) & 0xff);
    e.list = static_cast<FlightList>((head >> 16) & 0xff);
    e.device = low(w[0]);
    e.stage = high(w[1]);
    e.microbatch = low(w[1]);
    e.index = high(w[2]);
    e.group = low(w[2]);
    e.peer = high(w[3]);
    e.tag = low(w[3]);
    e.bytes = static_cast<int64_t>(w[4]);
    e.run = static_cast<int64_t>(w[5]);
    e.step = static_cast<int64_t>(w[6]);
    e.start_ns = static_cast<int64_t>(w[7]);
    e.end_ns = static_cast<int64_t>(w[8]);
    e.state = state;
    out.push_back(e);
  }
  std::sort(out.begin(), out.end(),
            [](const FlightEvent& a, const FlightEvent& b) { return a.seq < b.seq; });
  return out;
}

void FlightRecorder::set_run(int64_t run, int64_t step) {
  step_.store(step, relaxed);
  run_.store(run, relaxed);
}

int FlightRecorder::group(const std::string& name, const std::vector<int>& world_ranks) {
  std::lock_guard lock(mutex_);
  for (size_t g = 0; g < groups_.size(); ++g)
    if (groups_[g].name == name && groups_[g].world_ranks == world_ranks)
      return static_cast<int>(g);
  groups_.push_back({name, world_ranks});
  return static_cast<int>(groups_.size() - 1);
}

std::vector<FlightGroup> FlightRecorder::groups() const {
  std::lock_guard lock(mutex_);
  return groups_;
}

void FlightRecorder::set_action_list(FlightActionList l) {
  std::lock_guard lock(mutex_);
  for (FlightActionList& have : lists_)
    if (have.list == l.list && have.device == l.device) {
      have = std::move(l);
      return;
    }
  lists_.push_back(std::move(l));
}

std::vector<FlightActionList> FlightRecorder::action_lists() const {
  std::lock_guard lock(mutex_);
  return lists_;
}

FlightRecorder& flight_recorder() {
  static FlightRecorder recorder(4096);
  return recorder;
}

int64_t flight_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace pt
