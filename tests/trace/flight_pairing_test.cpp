// Pairing the sends and receives of flight records (engine/trace/flight_pairing.h) for the
// parameter server's request and reply: a worker's run advances, the server's stays 0, so pairing
// by run left every message unmatched (issue 37); in order, with the rings' ends and a receive
// that timed out (cancelled: it took nothing).
#include <doctest/doctest.h>

#include <map>

#include "engine/trace/flight_pairing.h"

using namespace pt;

namespace {

constexpr int64_t kMs = 1'000'000;

FlightRecord record(int rank, bool worker) {
  FlightRecord r;
  r.world_rank = rank;
  r.world_size = 2;
  r.groups = {{"world", {0, 1}}};
  if (worker) r.lists.push_back({FlightList::training, 0, "replica 0 device 0", {"0F0", "0B0"}});
  r.written_unix_ns = 1000 * kMs;
  return r;
}

// Appends a send or receive of `bytes` with `peer` on tag `tag`, [start, end) ms (end 0: open).
size_t add(FlightRecord& r, FlightKind kind, int peer, int tag, int64_t start_ms, int64_t end_ms,
           int64_t run, FlightState state = FlightState::finished) {
  FlightEvent e;
  e.kind = kind;
  e.op = static_cast<uint8_t>(kind == FlightKind::send ? CommOp::isend : CommOp::recv);
  e.group = 0;
  e.peer = peer;
  e.tag = tag;
  e.bytes = 40;
  e.run = run;
  e.step = run;
  e.start_ns = start_ms * kMs;
  e.end_ns = end_ms * kMs;
  e.state = end_ms == 0 ? FlightState::started : state;
  r.events.push_back(e);
  return r.events.size() - 1;
}

}  // namespace

TEST_CASE("a parameter server's traffic pairs in order, whatever the workers' runs") {
  FlightRecord worker = record(0, true), server = record(1, false);
  // The server's ring lost its first receive: the worker's first push has no partner in it.
  std::map<size_t, size_t> push_of;  // worker's send index -> server's receive index
  std::map<size_t, size_t> reply_of;
  const size_t lost_push = add(worker, FlightKind::send, 1, 11, 10, 10, 1);
  const size_t lost_reply_recv = add(worker, FlightKind::recv, 1, 12, 10, 13, 1);
  add(server, FlightKind::send, 0, 12, 12, 12, 0);  // its reply; its receive of the push was lost
  for (int k = 1; k <= 3; ++k) {
    const int64_t t = 20 * k;
    const size_t wait = add(server, FlightKind::recv, 0, 11, t - 5, t + 1, 0);
    const size_t push = add(worker, FlightKind::send, 1, 11, t, t, k + 1);
    const size_t recv = add(worker, FlightKind::recv, 1, 12, t, t + 3, k + 1);
    const size_t reply = add(server, FlightKind::send, 0, 12, t + 2, t + 2, 0);
    push_of[push] = wait;
    reply_of[reply] = recv;
  }
  const std::map<int, const FlightRecord*> records{{0, &worker}, {1, &server}};
  const FlightPairing p = pair_flight_messages(records);
  for (const auto& [push, wait] : push_of) {
    REQUIRE(p.partner_of({0, push}));
    CHECK(*p.partner_of({0, push}) == FlightEventId{1, wait});
    CHECK(*p.partner_of({1, wait}) == FlightEventId{0, push});
  }
  for (const auto& [reply, recv] : reply_of) {
    REQUIRE(p.partner_of({1, reply}));
    CHECK(*p.partner_of({1, reply}) == FlightEventId{0, recv});
  }
  // The first reply pairs too; the first push's receive is lost: not judged, not "unmatched".
  REQUIRE(p.partner_of({0, lost_reply_recv}));
  CHECK(!p.judged({0, lost_push}));
  for (const auto& [id, partner] : p.partner) CHECK(partner.first >= 0);
}

TEST_CASE("a stopped worker: a reply both posted is paired; a timed-out receive took nothing") {
  FlightRecord worker = record(0, true), server = record(1, false);
  add(server, FlightKind::recv, 0, 11, 5, 11, 0);
  add(worker, FlightKind::send, 1, 11, 10, 10, 1);
  // The worker's receive of the reply timed out (cancelled) before the server replied at 64 ms:
  // the server's reply goes to the worker's next receive, which is still open (stopped).
  const size_t gave_up = add(worker, FlightKind::recv, 1, 12, 20, 60, 1, FlightState::timed_out);
  const size_t stuck = add(worker, FlightKind::recv, 1, 12, 61, 0, 1);
  const size_t reply = add(server, FlightKind::send, 0, 12, 64, 3064, 0, FlightState::timed_out);
  const std::map<int, const FlightRecord*> records{{0, &worker}, {1, &server}};
  const FlightPairing p = pair_flight_messages(records);
  REQUIRE(p.partner_of({1, reply}));
  CHECK(*p.partner_of({1, reply}) == FlightEventId{0, stuck});
  CHECK(p.judged({0, gave_up}));
  CHECK(!p.partner_of({0, gave_up}));
}

TEST_CASE("ranks in lock step still pair by run") {
  FlightRecord a = record(0, true), b = record(1, true);
  const size_t s1 = add(a, FlightKind::send, 1, 5, 10, 11, 1);
  const size_t s2 = add(a, FlightKind::send, 1, 5, 20, 21, 2);
  const size_t r2 = add(b, FlightKind::recv, 0, 5, 19, 21, 2);
  const size_t r3 = add(b, FlightKind::recv, 0, 5, 30, 0, 2);  // run 2's second: never sent
  (void)s1;
  const std::map<int, const FlightRecord*> records{{0, &a}, {1, &b}};
  const FlightPairing p = pair_flight_messages(records);
  REQUIRE(p.partner_of({0, s2}));
  CHECK(*p.partner_of({0, s2}) == FlightEventId{1, r2});
  CHECK(p.judged({1, r3}));
  CHECK(!p.partner_of({1, r3}));
}
