// The flight recorder's ring: order, wrap-around, finish of an event that is gone, concurrent
// writers (device threads and a reader taking snapshots meanwhile: run under TSan too), and the
// file format read back as written. pipetrain-hang's use of it is tested end to end by
// tests/examples/flight_recorder.sh.
#include "engine/trace/flight_recorder.h"

#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <set>
#include <thread>
#include <vector>

#include "engine/core/error.h"
#include "engine/trace/flight_record_file.h"
#include "schedule/action.h"

using namespace pt;

namespace {

FlightEvent action_event(int device, int index) {
  FlightEvent e;
  e.kind = FlightKind::action;
  e.op = static_cast<uint8_t>(sched::ActionType::F);
  e.device = device;
  e.stage = device;
  e.microbatch = index;
  e.index = index;
  return e;
}

}  // namespace

TEST_CASE("events come back oldest first with what was recorded") {
  FlightRecorder r(8);
  r.set_run(3, 7);
  const uint64_t a = r.begin(action_event(1, 0));
  FlightEvent recv;
  recv.kind = FlightKind::recv;
  recv.op = static_cast<uint8_t>(CommOp::recv);
  recv.group = 0;
  recv.peer = 2;
  recv.tag = 11;
  recv.bytes = 64;
  const uint64_t b = r.begin(recv);
  r.finish(a, FlightState::finished);
  r.finish(b, FlightState::timed_out);
  r.begin(action_event(1, 1));  // still running
  const auto events = r.snapshot();
  REQUIRE(events.size() == 3);
  CHECK(events[0].seq == 0);
  CHECK(events[0].kind == FlightKind::action);
  CHECK(events[0].device == 1);
  CHECK(events[0].index == 0);
  CHECK(events[0].state == FlightState::finished);
  CHECK(events[0].run == 3);
  CHECK(events[0].step == 7);
  CHECK(events[0].end_ns >= events[0].start_ns);
  CHECK(events[1].kind == FlightKind::recv);
  CHECK(events[1].peer == 2);
  CHECK(events[1].tag == 11);
  CHECK(events[1].bytes == 64);
  CHECK(events[1].state == FlightState::timed_out);
  CHECK(events[2].state == FlightState::started);
  CHECK(events[2].end_ns == 0);
  CHECK(flight_event_name(events[2]) == "1F1");
}

TEST_CASE("the ring keeps the last N events, in order, after wrapping around") {
  FlightRecorder r(5);
  std::vector<uint64_t> tickets;
  for (int i = 0; i < 13; ++i) tickets.push_back(r.begin(action_event(0, i)));
  // The ticket of an event that N newer ones replaced: finishing it touches nothing.
  r.finish(tickets[2], FlightState::failed);
  r.finish(tickets[12], FlightState::finished);
  const auto events = r.snapshot();
  REQUIRE(events.size() == 5);
  for (size_t k = 0; k < events.size(); ++k) {
    CHECK(events[k].seq == 8 + k);
    CHECK(events[k].index == static_cast<int>(8 + k));
  }
  CHECK(events[4].state == FlightState::finished);
  for (size_t k = 0; k < 4; ++k) CHECK(events[k].state == FlightState::started);
}

TEST_CASE("a disabled recorder records nothing and its ticket 0 is ignored") {
  FlightRecorder r(4);
  r.set_enabled(false);
  const uint64_t t = r.begin(action_event(0, 0));
  CHECK(t == 0);
  r.finish(t, FlightState::finished);
  CHECK(r.snapshot().empty());
}

TEST_CASE("device threads record concurrently while another thread takes snapshots") {
  constexpr int kThreads = 4, kEach = 20000;
  FlightRecorder r(256);
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      const auto events = r.snapshot();
      // Every event read is whole: its fields are those one writer wrote together.
      for (const FlightEvent& e : events) {
        CHECK(e.stage == e.device);
        CHECK(e.microbatch == e.index);
      }
      for (size_t k = 1; k < events.size(); ++k) CHECK(events[k - 1].seq < events[k].seq);
    }
  });
  std::vector<std::thread> writers;
  for (int d = 0; d < kThreads; ++d)
    writers.emplace_back([&, d] {
      for (int i = 0; i < kEach; ++i) {
        const uint64_t t = r.begin(action_event(d, i));
        r.finish(t, FlightState::finished);
      }
    });
  for (auto& w : writers) w.join();
  done = true;
  reader.join();
  const auto events = r.snapshot();
  REQUIRE(events.size() == 256);
  // The last 256 of the 80000 begin() calls, each once.
  std::set<uint64_t> seqs;
  for (const FlightEvent& e : events) seqs.insert(e.seq);
  CHECK(seqs.size() == 256);
  CHECK(*seqs.begin() == kThreads * kEach - 256);
  // Each thread's events are in its own order.
  std::vector<int> last(kThreads, -1);
  for (const FlightEvent& e : events) {
    CHECK(e.state == FlightState::finished);
    CHECK(e.index > last[static_cast<size_t>(e.device)]);
    last[static_cast<size_t>(e.device)] = e.index;
  }
}

TEST_CASE("a record file reads back as it was written") {
  FlightRecorder r(16);
  r.set_run(1, 5);
  const int g = r.group("pipeline of replica 1", {2, 3});
  r.set_action_list({FlightList::training, 3, "replica 1 device 1 (cpu:0)", {"1RECV_F0", "1F0"}});
  r.finish(r.begin(action_event(3, 0)), FlightState::finished);
  FlightEvent send;
  send.kind = FlightKind::send;
  send.op = static_cast<uint8_t>(CommOp::isend);
  send.group = g;
  send.peer = 2;
  send.tag = 4;
  send.bytes = 100;
  r.begin(send);
  const FlightRecord written = capture_flight_record(r, 3, 4, "SIGUSR1");
  const FlightRecord back = parse_flight_record(flight_record_json(written), "test");
  CHECK(back.world_rank == 3);
  CHECK(back.world_size == 4);
  CHECK(back.reason == "SIGUSR1");
  REQUIRE(back.groups.size() == 1);
  CHECK(back.groups[0].name == "pipeline of replica 1");
  CHECK(back.groups[0].world_ranks == std::vector<int>{2, 3});
  REQUIRE(back.lists.size() == 1);
  CHECK(back.lists[0].actions == std::vector<std::string>{"1RECV_F0", "1F0"});
  REQUIRE(back.events.size() == 2);
  CHECK(flight_event_name(back.events[0]) == "3F0");
  CHECK(back.events[0].step == 5);
  CHECK(back.events[1].kind == FlightKind::send);
  CHECK(back.events[1].peer == 2);
  CHECK(back.events[1].tag == 4);
  CHECK(back.events[1].state == FlightState::started);
  // Times to the microsecond, as Unix times.
  CHECK(back.events[0].start_ns / 1000 == written.events[0].start_ns / 1000);
  CHECK(back.events[0].start_ns > 1'600'000'000LL * 1'000'000'000LL);

  const auto dir = std::filesystem::temp_directory_path() / "pipetrain_flight_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  write_flight_record(dir, written);
  CHECK(std::filesystem::exists(dir / "rank-00003.json"));
  const auto all = read_flight_records(dir);
  REQUIRE(all.size() == 1);
  CHECK(all[0].events.size() == 2);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a file that is not a flight record is refused with FileError") {
  CHECK_THROWS_AS(parse_flight_record("{}", "x.json"), FileError);
  CHECK_THROWS_AS(parse_flight_record("not json", "x.json"), FileError);
  CHECK_THROWS_AS(
      parse_flight_record(
          R"({"format":"pipetrain-flight-record","version":1,"world_rank":0,"world_size":1,)"
          R"("pid":1,"reason":"","written_unix_us":0,"capacity":4,"groups":[],"action_lists":[],)"
          R"("events":[{"seq":0,"kind":"recv","state":"started","op":"recv","group":3,)"
          R"("bytes":0,"run":0,"step":0,"start_unix_us":0,"end_unix_us":0}]})",
          "x.json"),
      FileError);
}
