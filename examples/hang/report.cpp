#include "examples/hang/report.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/pipeline/progress_grid.h"
#include "engine/trace/flight_pairing.h"

namespace pt::hang {

namespace {

// ---- helpers -----------------------------------------------------------------------------------

std::string clock_time(int64_t unix_ns) {  // "02:27:05.123 UTC"
  const std::time_t s = static_cast<std::time_t>(unix_ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&s, &tm);
  return fmt::format("{:02d}:{:02d}:{:02d}.{:03d} UTC", tm.tm_hour, tm.tm_min, tm.tm_sec,
                     static_cast<int>((unix_ns / 1'000'000) % 1000));
}

double seconds(int64_t ns) { return static_cast<double>(ns) / 1e9; }

std::string first_line(const std::string& s, size_t max = 240) {
  std::string line = s.substr(0, s.find('\n'));
  if (line.size() > max) line = line.substr(0, max) + " ...";
  return line;
}

struct Job {
  std::map<int, const FlightRecord*> by_rank;
  int world_size = 0;
  FlightPairing pairs;  // every judged send and receive, and its partner (flight_pairing.h)

  const FlightEvent& event(const FlightEventId& id) const {
    return by_rank.at(id.first)->events[id.second];
  }

  const FlightRecord* record(int rank) const {
    const auto it = by_rank.find(rank);
    return it == by_rank.end() ? nullptr : it->second;
  }
};

std::string group_text(const FlightGroupKey& g) {
  return fmt::format("'{}' (world ranks {})", g.first, fmt::join(g.second, ", "));
}

// The action of the rank's device that was running when `e` started (or the one before it).
std::string during(const FlightRecord& r, const FlightEvent& e) {
  const FlightEvent* last = nullptr;
  for (const FlightEvent& a : r.events)
    if (a.kind == FlightKind::action && a.start_ns <= e.start_ns) last = &a;
  if (!last) return "";
  const bool running = last->end_ns == 0 || last->end_ns >= e.start_ns;
  return fmt::format(", {} action {} of step {}", running ? "in" : "after",
                     flight_event_name(*last), last->step);
}

std::string how_long(const FlightRecord& r, const FlightEvent& e) {
  if (e.state == FlightState::timed_out)
    return fmt::format("timed out after {:.1f} s", seconds(e.end_ns - e.start_ns));
  return fmt::format("waiting for {:.1f} s when the record was written",
                     seconds(r.written_unix_ns - e.start_ns));
}

// ---- sections
// ------------------------------------------------------------------------------------

std::string records_section(const Job& job) {
  std::string out =
      fmt::format("flight records of {} of {} ranks:\n", job.by_rank.size(), job.world_size);
  for (int rank = 0; rank < job.world_size; ++rank) {
    const FlightRecord* r = job.record(rank);
    if (!r) {
      out += fmt::format(
          "  rank {}: no record (dead, killed before it could write one, or its folder is "
          "elsewhere)\n",
          rank);
      continue;
    }
    out += fmt::format("  rank {} (pid {}{}), written {}: {}\n", rank, r->pid,
                       runs_schedules(*r) ? "" : ", runs no schedule: a parameter server",
                       clock_time(r->written_unix_ns), first_line(r->reason));
  }
  return out;
}

// Every device's list with the action it was in, as the runtime's timeout messages show them.
std::string grid_section(const Job& job) {
  std::vector<DeviceProgress> grid;
  for (const auto& [rank, r] : job.by_rank) {
    std::set<int> devices;
    for (const FlightActionList& l : r->lists) devices.insert(l.device);
    for (int device : devices) {
      const FlightEvent* last = nullptr;
      for (const FlightEvent& e : r->events)
        if (e.kind == FlightKind::action && e.device == device) last = &e;
      const FlightList list = last ? last->list : FlightList::training;
      const FlightActionList* actions = nullptr;
      for (const FlightActionList& l : r->lists)
        if (l.device == device && l.list == list) actions = &l;
      if (!actions) continue;
      DeviceProgress p;
      p.label = fmt::format("rank {}, {}", rank, actions->label);
      if (last)
        p.label += fmt::format(", step {}{}", last->step,
                               list == FlightList::evaluation ? " (evaluation)" : "");
      p.actions = actions->actions;
      p.position = !last ? -1
                   : flight_event_open(*last) || last->state == FlightState::failed
                       ? last->index
                       : last->index + 1;
      grid.push_back(std::move(p));
    }
  }
  return render_progress(grid);
}

// A wait shorter than this, in a record written on request (SIGUSR1) of a healthy job, is the
// job's normal traffic, not a hang: it is listed, but it names nobody as stalled.
constexpr double kLongWaitS = 1.0;

struct Wait {
  int waiter;
  std::vector<int> waited_for;
  std::string text;
  bool long_wait;  // timed out, or kLongWaitS or longer
};

// Whether the receive that took send `id` finished (the send is done then, even if nobody has
// tested its request yet).
bool received(const Job& job, const FlightEventId& id) {
  const FlightEventId* partner = job.pairs.partner_of(id);
  return partner && job.event(*partner).state == FlightState::finished;
}

// Whether open call `id` (a send or a receive) is stuck on its own rank's side: both sides
// posted the message, so neither waits for the other to post it, and the transfer needs both
// processes to make progress. The side that timed out was still running its waits; a side
// still in the call past that is the one that stopped (SIGSTOP, swapped out, starved), and so is
// a side that timed out long after the other. Where neither timed out, the receiver holds it up
// (the message is there to take).
bool stuck_here(const Job& job, const FlightEventId& id) {
  const FlightEvent& e = job.event(id);
  if (job.pairs.sent_while_waiting.count(id)) return true;
  const FlightEventId* p = job.pairs.partner_of(id);
  if (!p || !flight_event_open(e)) return false;
  const FlightEvent& other = job.event(*p);
  if (other.state == FlightState::finished) return e.kind == FlightKind::recv;
  const bool gave_up = e.state == FlightState::timed_out,
             other_gave_up = other.state == FlightState::timed_out;
  if (gave_up != other_gave_up) return other_gave_up;
  if (gave_up) {
    // Both timed out, from the same timeout: a healthy side gives up within it (a receive up to
    // 2 s later: the time a cancel may take), so a side that gave up much later woke up late.
    constexpr int64_t kLateNs = 2'500'000'000;
    return (e.end_ns - e.start_ns) > (other.end_ns - other.start_ns) + kLateNs;
  }
  return e.kind == FlightKind::recv;
}

// The ranks each open communication call waits for.
std::vector<Wait> waits(const Job& job) {
  std::vector<Wait> out;
  for (const auto& [rank, r] : job.by_rank) {
    // Per (group, run): how many collectives came before, to compare with the other members.
    std::map<std::pair<FlightGroupKey, int64_t>, int> ordinal;
    for (size_t i = 0; i < r->events.size(); ++i) {
      const FlightEvent& e = r->events[i];
      if (e.kind == FlightKind::action) continue;
      const FlightGroupKey g = flight_group_of(*r, e);
      int k = -1;
      if (e.kind == FlightKind::collective) k = ordinal[{g, e.run}]++;
      if (!flight_event_open(e)) continue;
      if (e.kind == FlightKind::send && received(job, {rank, i})) continue;
      Wait w{rank,
             {},
             "",
             e.state == FlightState::timed_out ||
                 seconds(r->written_unix_ns - e.start_ns) >= kLongWaitS};
      if (e.kind == FlightKind::recv) {
        const FlightEventId* sent = job.pairs.partner_of({rank, i});
        w.text = fmt::format("recv from rank {}, tag {} ({} bytes) in {}{}: {}", e.peer, e.tag,
                             e.bytes, group_text(g), during(*r, e), how_long(*r, e));
        if (sent)
          w.text += fmt::format("; rank {} posted the matching send at {} ({})", e.peer,
                                clock_time(job.event(*sent).start_ns),
                                flight_state_name(job.event(*sent).state));
        if (job.pairs.sent_while_waiting.count({rank, i}))
          w.text += fmt::format(
              "; rank {} had sent the message before it gave up (the next "
              "receive took it)",
              e.peer);
        if (stuck_here(job, {rank, i}))
          w.text += ", so it waits for no one but itself";
        else
          w.waited_for = {e.peer};
      } else if (e.kind == FlightKind::send) {
        w.text = fmt::format("send to rank {}, tag {} ({} bytes) in {} not completed{}: {}", e.peer,
                             e.tag, e.bytes, group_text(g), during(*r, e), how_long(*r, e));
        if (const FlightEventId* took = job.pairs.partner_of({rank, i}))
          w.text += fmt::format("; rank {} posted the matching recv at {} ({})", e.peer,
                                clock_time(job.event(*took).start_ns),
                                flight_state_name(job.event(*took).state));
        if (stuck_here(job, {rank, i}))
          w.text += ", so it waits for no one but itself";
        else
          w.waited_for = {e.peer};
      } else {
        // Members that had not reached the same collective (the k-th of this run on this group)
        // while this rank waited: not at all, or only after it gave up. A member stopped
        // (SIGSTOP) and resumed by mpirun's teardown walks into the collective late and writes
        // its record there; by then the waiter had timed out waiting for it.
        std::string late;
        for (int m : g.second) {
          if (m == rank) continue;
          const FlightRecord* other = job.record(m);
          const FlightEvent* kth = nullptr;
          int seen = 0;
          if (other)
            for (const FlightEvent& o : other->events)
              if (o.kind == FlightKind::collective && o.run == e.run &&
                  flight_group_of(*other, o) == g && seen++ == k)
                kth = &o;
          const bool after_giving_up =
              kth && e.state == FlightState::timed_out && kth->start_ns > e.end_ns;
          if (!kth || after_giving_up) w.waited_for.push_back(m);
          if (after_giving_up)
            late += fmt::format("; rank {} reached it at {}, after this rank gave up", m,
                                clock_time(kth->start_ns));
        }
        w.text = fmt::format(
            "{} ({} bytes) in {}{}: {}; not there: {}{}", comm_op_name(static_cast<CommOp>(e.op)),
            e.bytes, group_text(g), during(*r, e), how_long(*r, e),
            w.waited_for.empty() ? std::string("none (it is in progress)")
                                 : fmt::format("rank {}", fmt::join(w.waited_for, ", rank ")),
            late);
      }
      out.push_back(std::move(w));
    }
  }
  return out;
}

std::string waits_section(const Job& job, const std::vector<Wait>& ws) {
  std::string out = "who waits for whom:\n";
  if (ws.empty()) out += "  nobody: no rank was inside a communication call\n";
  for (const Wait& w : ws)
    out += fmt::format("  rank {} waits for {}: {}\n", w.waiter,
                       w.waited_for.empty()
                           ? std::string("nobody in particular")
                           : fmt::format("rank {}", fmt::join(w.waited_for, ", rank ")),
                       w.text);
  // The ranks at the end of the chains: waited for, waiting for nobody.
  std::map<int, std::set<int>> waited_by;
  std::set<int> waiting;
  for (const Wait& w : ws) {
    if (!w.long_wait) continue;
    // A call that waits for nobody (a receive whose send was posted, a collective every member
    // reached) leaves its rank at the end of a chain.
    if (!w.waited_for.empty()) waiting.insert(w.waiter);
    for (int p : w.waited_for) waited_by[p].insert(w.waiter);
  }
  if (waiting.empty()) {
    if (!ws.empty())
      out += fmt::format(
          "no wait has lasted {:g} s or timed out: the job was moving when the records were "
          "written\n",
          kLongWaitS);
    return out;
  }
  bool any = false;
  for (const auto& [rank, by] : waited_by) {
    if (waiting.count(rank)) continue;
    any = true;
    out += fmt::format("stalled: rank {} (waited for by rank {}) waits for nobody", rank,
                       fmt::join(by, ", rank "));
    const FlightRecord* r = job.record(rank);
    if (!r) {
      out += " and wrote no record: it died, was killed, or its folder is elsewhere\n";
      continue;
    }
    // A transfer both sides posted that is stuck on this rank's side (stuck_here): the rank
    // itself stopped making progress.
    const FlightEvent* stuck = nullptr;
    for (size_t i = 0; i < r->events.size(); ++i)
      if (stuck_here(job, {rank, i})) stuck = &r->events[i];
    if (stuck) {
      out += fmt::format(
          ": it is in a {} rank {} (tag {}, {} bytes) since {} although rank {} posted the "
          "{}: this process stopped making progress (stopped by a signal such as SIGSTOP, "
          "swapped out or starved of CPU)\n",
          stuck->kind == FlightKind::recv ? "receive from" : "send to", stuck->peer, stuck->tag,
          stuck->bytes, clock_time(stuck->start_ns), stuck->peer,
          stuck->kind == FlightKind::send          ? "matching receive and gave up waiting"
          : stuck->state == FlightState::timed_out ? "message before it timed out"
                                                   : "matching send");
      continue;
    }
    const FlightEvent* last = nullptr;
    for (const FlightEvent& e : r->events)
      if (e.kind == FlightKind::action) last = &e;
    if (!last) {
      out += " and ran no action yet\n";
    } else if (flight_event_open(*last)) {
      out +=
          fmt::format(": it is in action {} of step {}, for {:.1f} s\n", flight_event_name(*last),
                      last->step, seconds(r->written_unix_ns - last->start_ns));
    } else {
      out += fmt::format(
          ": its last action, {} of step {}, ended {:.1f} s before its record was written; it is "
          "stuck outside the pipeline's actions and communication (computation, I/O, a sleep, a "
          "lock)\n",
          flight_event_name(*last), last->step, seconds(r->written_unix_ns - last->end_ns));
    }
  }
  if (!any) out += "no rank is waited for without waiting itself: look for a cycle above\n";
  return out;
}

// The judged sends and receives without a partner (flight_pairing.h: by run between ranks in
// lock step, in order to and from a parameter server).
std::string unmatched_section(const Job& job) {
  struct Left {
    int rank;
    const FlightEvent* e;
    bool is_send;
  };
  std::vector<Left> left;
  for (const auto& [id, partner] : job.pairs.partner)
    if (partner.first < 0) {
      const FlightEvent& e = job.event(id);
      left.push_back({id.first, &e, e.kind == FlightKind::send});
    }
  if (left.empty()) return "first unmatched send or receive: none (every one has its partner)\n";
  const Left& first = *std::min_element(left.begin(), left.end(), [](const Left& a, const Left& b) {
    return a.e->start_ns < b.e->start_ns;
  });
  const FlightRecord& r = *job.record(first.rank);
  const FlightEvent& e = *first.e;
  const bool peer_recorded = job.record(e.peer) != nullptr;
  return fmt::format(
      "first unmatched send or receive ({} in all): rank {}'s {} rank {}, tag {} ({} bytes) in "
      "{}, step {}{}, started {} ({}): {}\n",
      left.size(), first.rank, first.is_send ? "send to" : "recv from", e.peer, e.tag, e.bytes,
      group_text(flight_group_of(r, e)), e.step, during(r, e), clock_time(e.start_ns),
      flight_state_name(e.state),
      !peer_recorded  ? fmt::format("rank {} wrote no record, so what it did is unknown", e.peer)
      : first.is_send ? fmt::format("rank {} never posted the matching recv", e.peer)
                      : fmt::format("rank {} never sent it", e.peer));
}

}  // namespace

std::string report(const std::vector<FlightRecord>& records) {
  Job job;
  for (const FlightRecord& r : records) {
    job.by_rank[r.world_rank] = &r;
    job.world_size = std::max({job.world_size, r.world_size, r.world_rank + 1});
  }
  job.pairs = pair_flight_messages(job.by_rank);
  const std::vector<Wait> ws = waits(job);
  return records_section(job) + "\n" + grid_section(job) + "\n" + waits_section(job, ws) + "\n" +
         unmatched_section(job);
}

}  // namespace pt::hang
