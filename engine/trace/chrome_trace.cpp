#include "engine/trace/chrome_trace.h"

#include <fmt/format.h>

#include <cstddef>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <tuple>

#include "engine/io/atomic_file.h"

namespace pt {
namespace {

using Json = nlohmann::ordered_json;  // fields in the order written: easier to read by eye
using sched::ActionType;

constexpr int kPid = 0;  // one process; devices are its threads (tid = device index)

const char* category(ActionType t) {
  // REDUCE_GRAD is a data-parallel collective: communication, like the sends it may overlap.
  return sched::is_communication(t) || t == ActionType::REDUCE_GRAD ? "communication" : "compute";
}

Json metadata(const char* name, int tid, Json args) {
  Json j = {{"name", name}, {"ph", "M"}, {"pid", kPid}};
  if (tid >= 0) j["tid"] = tid;
  j["args"] = std::move(args);
  return j;
}

Json complete_event(const TraceEvent& e) {
  return {
      {"name", e.action.str()},
      {"cat", category(e.action.type)},
      {"ph", "X"},
      {"pid", kPid},
      {"tid", e.device},
      {"ts", e.start_us},
      {"dur", e.end_us - e.start_us},
      {"args", {{"stage", e.action.stage}, {"microbatch", e.action.microbatch}, {"step", e.step}}}};
}

// A flow end point bound to the slice that encloses `ts` on that track. The midpoint of the
// slice is used, not its start, so the binding never depends on how a viewer treats ties at a
// slice's edges.
Json flow_point(const char* ph, const char* name, long id, const TraceEvent& e) {
  Json j = {
      {"name", name},    {"cat", "communication"},           {"ph", ph}, {"id", id}, {"pid", kPid},
      {"tid", e.device}, {"ts", (e.start_us + e.end_us) / 2}};
  if (ph[0] == 'f') j["bp"] = "e";  // bind to the enclosing RECV slice, not the next slice
  return j;
}

// Where a SEND's data arrives: (step, receive type, receiving stage, micro-batch).
using TransferKey = std::tuple<int, ActionType, int, int>;

// Pairs each SEND with the matching RECV of the same step (first with first when a key repeats);
// sends without a receive (a trace cut short) get no arrow.
std::vector<Json> flow_events(const Trace& trace) {
  std::map<TransferKey, std::deque<size_t>> receives;
  for (size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    if (e.action.type == ActionType::RECV_F || e.action.type == ActionType::RECV_B)
      receives[{e.step, e.action.type, e.action.stage, e.action.microbatch}].push_back(i);
  }
  std::vector<Json> out;
  long id = 0;
  for (const TraceEvent& send : trace.events) {
    const ActionType t = send.action.type;
    if (t != ActionType::SEND_F && t != ActionType::SEND_B) continue;
    const bool forward = t == ActionType::SEND_F;
    const TransferKey key{send.step, forward ? ActionType::RECV_F : ActionType::RECV_B,
                          send.action.stage + (forward ? 1 : -1), send.action.microbatch};
    auto it = receives.find(key);
    if (it == receives.end() || it->second.empty()) continue;
    const TraceEvent& recv = trace.events[it->second.front()];
    it->second.pop_front();
    const char* name = forward ? "activation" : "gradient";
    out.push_back(flow_point("s", name, id, send));
    out.push_back(flow_point("f", name, id, recv));
    ++id;
  }
  return out;
}

}  // namespace

std::string chrome_trace_json(const Trace& trace) {
  check_trace(trace);
  std::vector<Json> events;
  events.push_back(metadata("process_name", -1, {{"name", "pipetrain"}}));
  for (size_t d = 0; d < trace.device_names.size(); ++d) {
    const int tid = static_cast<int>(d);
    events.push_back(metadata("thread_name", tid, {{"name", trace.device_names[d]}}));
    // Viewers otherwise sort tracks by name or first event: keep device order.
    events.push_back(metadata("thread_sort_index", tid, {{"sort_index", tid}}));
  }
  for (const TraceEvent& e : trace.events) events.push_back(complete_event(e));
  for (Json& f : flow_events(trace)) events.push_back(std::move(f));

  // One event per line: a large trace stays greppable and diffs stay readable.
  std::string text = "{\"traceEvents\":[\n";
  for (size_t i = 0; i < events.size(); ++i) {
    text += events[i].dump();
    text += i + 1 < events.size() ? ",\n" : "\n";
  }
  text += "],\n\"displayTimeUnit\":\"ms\"}\n";
  return text;
}

void write_chrome_trace(const std::filesystem::path& path, const Trace& trace) {
  const std::string text = chrome_trace_json(trace);
  write_file_atomically(path, std::as_bytes(std::span(text)));
}

}  // namespace pt
