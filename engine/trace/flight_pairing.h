#pragma once
// Which receive in one rank's flight record took which send in another's (pipetrain-hang's "who
// waits for whom" and "first unmatched send or receive" rest on it).
//
// Messages between two ranks on one group and tag are delivered in the order they were sent (MPI
// does not let them overtake each other), so the k-th send pairs with the k-th receive; what is
// unknown is where each ring begins, since old events are overwritten. Two ways to line the rings
// up, by the kind of traffic:
//  - between ranks that run schedules (the pipeline, the all-reduce, a save): every event carries
//    its run (schedule runs started before it), the same on both sides in lock step, so the k-th
//    send of run n pairs with the k-th receive of run n; only runs that every such record still
//    covers are judged;
//  - to and from a rank that runs no schedule (a parameter server: its run stays 0, while each
//    worker's advances at its own pace), runs say nothing: the receives are lined up with the
//    sends at the offset that no receive finishes before its send started (a parameter server's
//    request and reply alternate, which leaves one such offset), and events before the first pair
//    or from before the peer's ring begins are not judged.
// Before this second way, a parameter server's traffic was matched by run: every message of an
// asynchronous run was "unmatched" (1,542 of them), and a timed-out send looked received.
// Either way, a receive that timed out was cancelled: it took no message (the next receive takes
// it), so it stays out of the order and is judged unmatched, unless its message had begun to
// arrive (flight_pairing.cpp).
#include <cstddef>
#include <map>
#include <set>
#include <utility>

#include "engine/trace/flight_record_file.h"

namespace pt {

// An event of the job: (world rank, index into that rank's FlightRecord::events).
using FlightEventId = std::pair<int, size_t>;

struct FlightPairing {
  // Each judged send and receive, and its partner on the peer ({-1, 0}: none).
  std::map<FlightEventId, FlightEventId> partner;
  // Receives that timed out although their message had been sent before they gave up (a later
  // receive took it): their own process did not run meanwhile (stopped, swapped out, starved).
  std::set<FlightEventId> sent_while_waiting;
  bool judged(const FlightEventId& e) const { return partner.count(e) != 0; }
  // The partner of a judged event, or null (unpaired, or not judged).
  const FlightEventId* partner_of(const FlightEventId& e) const {
    const auto it = partner.find(e);
    return it == partner.end() || it->second.first < 0 ? nullptr : &it->second;
  }
};

// Whether the record's rank runs schedules (actions), as workers do and parameter servers do not.
bool runs_schedules(const FlightRecord& r);

// `records`: by world rank, any subset of the job's ranks. A send or receive whose peer wrote no
// record is not judged.
FlightPairing pair_flight_messages(const std::map<int, const FlightRecord*>& records);

}  // namespace pt
