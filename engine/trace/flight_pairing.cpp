#include "engine/trace/flight_pairing.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

namespace pt {

namespace {

using Records = std::map<int, const FlightRecord*>;
using Key = std::tuple<FlightGroupKey, int, int, int>;  // group, from, to, tag

constexpr FlightEventId kNone{-1, 0};
constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

struct Lists {
  std::vector<FlightEventId> sends, recvs;  // each in the order its rank began them
  // Receives that timed out: cancelled, they took no message (the next receive takes it), so
  // they stay out of the order; unless the message had begun to arrive (a send posted before the
  // receive gave up), which only the last receive of a failing rank can have done.
  std::vector<FlightEventId> timed_out;
};

const FlightEvent& event(const Records& records, const FlightEventId& id) {
  return records.at(id.first)->events[id.second];
}

// Where a record's ring begins: the start of its oldest event (events begun earlier are lost).
int64_t ring_begins(const FlightRecord& r) {
  int64_t t = kNever;
  for (const FlightEvent& e : r.events)
    if (e.start_ns) t = std::min(t, e.start_ns);
  return t == kNever ? 0 : t;
}

// Lock step: the k-th send of run n with the k-th receive of run n, for runs >= window.
void pair_by_run(const Lists& l, const Records& records, int64_t window, FlightPairing& out) {
  std::map<int64_t, std::pair<std::vector<FlightEventId>, std::vector<FlightEventId>>> runs;
  for (const FlightEventId& s : l.sends)
    if (event(records, s).run >= window) runs[event(records, s).run].first.push_back(s);
  for (const FlightEventId& r : l.recvs)
    if (event(records, r).run >= window) runs[event(records, r).run].second.push_back(r);
  for (const auto& [run, lists] : runs) {
    const auto& [sends, recvs] = lists;
    for (size_t k = 0; k < std::max(sends.size(), recvs.size()); ++k) {
      if (k < sends.size()) out.partner[sends[k]] = k < recvs.size() ? recvs[k] : kNone;
      if (k < recvs.size()) out.partner[recvs[k]] = k < sends.size() ? sends[k] : kNone;
    }
  }
  for (const FlightEventId& r : l.timed_out)
    if (event(records, r).run >= window) out.partner[r] = kNone;
}

// In order, at the offset that explains the rings best (see the header).
void pair_in_order(const Lists& l, const Records& records, FlightPairing& out) {
  const auto& S = l.sends;
  const auto& R = l.recvs;
  const FlightEventId& any_recv = R.empty() ? l.timed_out[0] : R[0];
  const FlightRecord& sender = *records.at(S.empty() ? event(records, any_recv).peer : S[0].first);
  const FlightRecord& receiver =
      *records.at(R.empty() && l.timed_out.empty() ? event(records, S[0]).peer : any_recv.first);
  const int64_t sender_from = ring_begins(sender), receiver_from = ring_begins(receiver);
  const auto ns = static_cast<std::ptrdiff_t>(S.size()), nr = static_cast<std::ptrdiff_t>(R.size());
  // Offset d pairs R[j] with S[j + d]. Judged, of what it leaves unpaired: what the peer's ring
  // covers (from where it begins to when it was written); before that, the partner may be lost.
  // Returns {receives finished before their send began, judged events left unpaired, -pairs};
  // with `apply`, records the pairs and the judged unpaired events in `out`.
  const auto judge = [&](std::ptrdiff_t d, bool apply) {
    int64_t violations = 0, unpaired = 0, pairs = 0;
    const std::ptrdiff_t lo = std::max<std::ptrdiff_t>(0, -d), hi = std::min(nr, ns - d);
    for (std::ptrdiff_t j = lo; j < hi; ++j) {
      const FlightEvent& r = event(records, R[static_cast<size_t>(j)]);
      const FlightEvent& s = event(records, S[static_cast<size_t>(j + d)]);
      ++pairs;
      if (r.end_ns != 0 && r.state != FlightState::started && r.end_ns < s.start_ns) ++violations;
      if (apply) {
        out.partner[R[static_cast<size_t>(j)]] = S[static_cast<size_t>(j + d)];
        out.partner[S[static_cast<size_t>(j + d)]] = R[static_cast<size_t>(j)];
      }
    }
    const auto judged = [](const FlightEvent& e, int64_t from, const FlightRecord& peer) {
      return e.start_ns >= from && e.start_ns <= peer.written_unix_ns;
    };
    for (std::ptrdiff_t i = 0; i < ns; ++i) {
      const std::ptrdiff_t j = i - d;
      if ((j >= lo && j < hi) ||
          !judged(event(records, S[static_cast<size_t>(i)]), receiver_from, receiver))
        continue;
      ++unpaired;
      if (apply) out.partner[S[static_cast<size_t>(i)]] = kNone;
    }
    for (std::ptrdiff_t j = 0; j < nr; ++j) {
      if ((j >= lo && j < hi) ||
          !judged(event(records, R[static_cast<size_t>(j)]), sender_from, sender))
        continue;
      ++unpaired;
      if (apply) out.partner[R[static_cast<size_t>(j)]] = kNone;
    }
    return std::tuple<int64_t, int64_t, int64_t>{violations, unpaired, -pairs};
  };
  // The fewest receives finished before their send began, then the fewest judged events left
  // unpaired, then the most pairs, then the smallest shift. A shift beyond kMaxShift would mean
  // rings thousands of messages apart, which rings of 4096 events do not hold.
  constexpr std::ptrdiff_t kMaxShift = 1024;
  std::ptrdiff_t best_d = 0;
  std::tuple<int64_t, int64_t, int64_t, std::ptrdiff_t> best{kNever, 0, 0, 0};
  for (std::ptrdiff_t d = std::max(-nr, -kMaxShift); d <= std::min(ns, kMaxShift); ++d) {
    const auto [violations, unpaired, pairs] = judge(d, false);
    const std::tuple<int64_t, int64_t, int64_t, std::ptrdiff_t> score{violations, unpaired, pairs,
                                                                      d < 0 ? -d : d};
    if (score < best) best = score, best_d = d;
  }
  judge(best_d, true);
  const bool paired = std::get<2>(best) < 0;
  // A receive that timed out after the last pair, with a send of its size posted before it gave
  // up and taken by no other receive: that message had begun to arrive.
  const std::ptrdiff_t last_j = paired ? std::min(nr, ns - best_d) - 1 : -1;
  std::ptrdiff_t next_i = paired ? last_j + best_d + 1 : 0;
  for (const FlightEventId& id : l.timed_out) {
    const FlightEvent& r = event(records, id);
    if (last_j >= 0 && id.second < R[static_cast<size_t>(last_j)].second) {
      out.partner[id] = kNone;
      // The next receive in line took a message sent before this one gave up.
      for (std::ptrdiff_t j = 0; j <= last_j; ++j)
        if (R[static_cast<size_t>(j)].second > id.second) {
          const std::ptrdiff_t i = j + best_d;
          if (i >= 0 && i < ns && event(records, S[static_cast<size_t>(i)]).start_ns < r.end_ns)
            out.sent_while_waiting.insert(id);
          break;
        }
      continue;
    }
    while (next_i < ns && event(records, S[static_cast<size_t>(next_i)]).start_ns <= r.end_ns &&
           event(records, S[static_cast<size_t>(next_i)]).bytes != r.bytes)
      ++next_i;
    if (next_i < ns && event(records, S[static_cast<size_t>(next_i)]).start_ns <= r.end_ns) {
      out.partner[id] = S[static_cast<size_t>(next_i)];
      out.partner[S[static_cast<size_t>(next_i)]] = id;
      ++next_i;
      continue;
    }
    if (r.start_ns >= sender_from && r.start_ns <= sender.written_unix_ns) out.partner[id] = kNone;
  }
}

}  // namespace

bool runs_schedules(const FlightRecord& r) {
  if (!r.lists.empty()) return true;
  return std::any_of(r.events.begin(), r.events.end(),
                     [](const FlightEvent& e) { return e.kind == FlightKind::action; });
}

FlightPairing pair_flight_messages(const Records& records) {
  // Lock-step traffic: only runs every schedule-running record still covers (older ones may have
  // left some rings).
  int64_t window = kNever;
  for (const auto& [rank, r] : records) {
    if (!runs_schedules(*r)) continue;
    int64_t last = 0;
    for (const FlightEvent& e : r->events) last = std::max(last, e.run);
    window = std::min(window, last);
  }
  if (window == kNever) window = 0;
  FlightPairing out;
  std::map<Key, Lists> lists;
  for (const auto& [rank, r] : records)
    for (size_t i = 0; i < r->events.size(); ++i) {
      const FlightEvent& e = r->events[i];
      if (e.kind == FlightKind::send)
        lists[{flight_group_of(*r, e), rank, e.peer, e.tag}].sends.push_back({rank, i});
      else if (e.kind == FlightKind::recv) {
        Lists& l = lists[{flight_group_of(*r, e), e.peer, rank, e.tag}];
        (e.state == FlightState::timed_out ? l.timed_out : l.recvs).push_back({rank, i});
      }
    }
  for (const auto& [key, l] : lists) {
    const int from = std::get<1>(key), to = std::get<2>(key);
    const auto sender = records.find(from), receiver = records.find(to);
    if (sender == records.end() || receiver == records.end()) {
      // The peer wrote no record: what it did is unknown; a call still waiting is judged
      // unmatched (its peer is where to look), the rest is not judged.
      for (const auto* side : {&l.sends, &l.recvs, &l.timed_out})
        for (const FlightEventId& id : *side)
          if (flight_event_open(event(records, id))) out.partner[id] = kNone;
      continue;
    }
    if (runs_schedules(*sender->second) && runs_schedules(*receiver->second))
      pair_by_run(l, records, window, out);
    else
      pair_in_order(l, records, out);
  }
  return out;
}

}  // namespace pt
