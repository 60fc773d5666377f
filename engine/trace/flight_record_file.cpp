#include "engine/trace/flight_record_file.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "schedule/action.h"

namespace pt {

namespace {

using Json = nlohmann::json;

std::string_view list_name(FlightList l) {
  return l == FlightList::training ? "training" : "evaluation";
}

FlightList parse_list(const std::string& s) {
  if (s == "training") return FlightList::training;
  if (s == "evaluation") return FlightList::evaluation;
  throw std::invalid_argument(fmt::format("unknown action list '{}'", s));
}

template <typename Enum, size_t N>
Enum parse_name(const std::string& s, std::string_view (*name)(Enum), std::string_view what) {
  for (size_t i = 0; i < N; ++i)
    if (name(static_cast<Enum>(i)) == s) return static_cast<Enum>(i);
  throw std::invalid_argument(fmt::format("unknown {} '{}'", what, s));
}

int64_t us(int64_t ns) { return ns / 1000; }

}  // namespace

std::string flight_event_name(const FlightEvent& e) {
  if (e.kind == FlightKind::action)
    return sched::Action{e.stage, static_cast<sched::ActionType>(e.op), e.microbatch}.str();
  return std::string(comm_op_name(static_cast<CommOp>(e.op)));
}

FlightRecord capture_flight_record(const FlightRecorder& recorder, int world_rank, int world_size,
                                   std::string reason) {
  FlightRecord r;
  r.world_rank = world_rank;
  r.world_size = world_size;
  r.pid = static_cast<int64_t>(::getpid());
  r.reason = std::move(reason);
  r.capacity = static_cast<int64_t>(recorder.capacity());
  r.events = recorder.snapshot();
  r.groups = recorder.groups();
  r.lists = recorder.action_lists();
  // Steady-clock times to Unix times: one offset, taken now.
  const int64_t steady = flight_now_ns();
  r.written_unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  const int64_t offset = r.written_unix_ns - steady;
  for (FlightEvent& e : r.events) {
    if (e.start_ns) e.start_ns += offset;
    if (e.end_ns) e.end_ns += offset;
  }
  return r;
}

std::string flight_record_json(const FlightRecord& r) {
  Json j;
  j["format"] = "pipetrain-flight-record";
  j["version"] = 1;
  j["world_rank"] = r.world_rank;
  j["world_size"] = r.world_size;
  j["pid"] = r.pid;
  j["reason"] = r.reason;
  j["written_unix_us"] = us(r.written_unix_ns);
  j["capacity"] = r.capacity;
  j["groups"] = Json::array();
  for (const FlightGroup& g : r.groups)
    j["groups"].push_back({{"name", g.name}, {"world_ranks", g.world_ranks}});
  j["action_lists"] = Json::array();
  for (const FlightActionList& l : r.lists)
    j["action_lists"].push_back({{"list", list_name(l.list)},
                                 {"device", l.device},
                                 {"label", l.label},
                                 {"actions", l.actions}});
  Json events = Json::array();
  for (const FlightEvent& e : r.events) {
    Json x;
    x["seq"] = e.seq;
    x["kind"] = flight_kind_name(e.kind);
    x["state"] = flight_state_name(e.state);
    if (e.kind == FlightKind::action) {
      x["action"] = flight_event_name(e);
      x["list"] = list_name(e.list);
      x["device"] = e.device;
      x["index"] = e.index;
    } else {
      x["op"] = comm_op_name(static_cast<CommOp>(e.op));
      x["group"] = e.group;
      if (e.peer >= 0) x["peer"] = e.peer;
      if (e.tag >= 0) x["tag"] = e.tag;
      x["bytes"] = e.bytes;
    }
    x["run"] = e.run;
    x["step"] = e.step;
    x["start_unix_us"] = us(e.start_ns);
    x["end_unix_us"] = us(e.end_ns);
    events.push_back(std::move(x));
  }
  j["events"] = std::move(events);
  return j.dump(1);
}

FlightRecord parse_flight_record(std::string_view text, const std::string& source) {
  try {
    const Json j = Json::parse(text);
    if (j.at("format") != "pipetrain-flight-record" || j.at("version") != 1)
      throw std::invalid_argument("not a version-1 pipetrain flight record");
    FlightRecord r;
    r.world_rank = j.at("world_rank").get<int>();
    r.world_size = j.at("world_size").get<int>();
    r.pid = j.at("pid").get<int64_t>();
    r.reason = j.at("reason").get<std::string>();
    r.written_unix_ns = j.at("written_unix_us").get<int64_t>() * 1000;
    r.capacity = j.at("capacity").get<int64_t>();
    for (const Json& g : j.at("groups"))
      r.groups.push_back(
          {g.at("name").get<std::string>(), g.at("world_ranks").get<std::vector<int>>()});
    for (const Json& l : j.at("action_lists"))
      r.lists.push_back({parse_list(l.at("list").get<std::string>()), l.at("device").get<int>(),
                         l.at("label").get<std::string>(),
                         l.at("actions").get<std::vector<std::string>>()});
    for (const Json& x : j.at("events")) {
      FlightEvent e;
      e.seq = x.at("seq").get<uint64_t>();
      e.kind = parse_name<FlightKind, 4>(x.at("kind").get<std::string>(), flight_kind_name,
                                         "event kind");
      e.state = parse_name<FlightState, 4>(x.at("state").get<std::string>(), flight_state_name,
                                           "event state");
      if (e.kind == FlightKind::action) {
        const std::string text_form = x.at("action").get<std::string>();
        const auto a = sched::parse_action(text_form);
        if (!a) throw std::invalid_argument(fmt::format("'{}' is not an action", text_form));
        e.op = static_cast<uint8_t>(a->type);
        e.stage = a->stage;
        e.microbatch = a->microbatch;
        e.list = parse_list(x.at("list").get<std::string>());
        e.device = x.at("device").get<int>();
        e.index = x.at("index").get<int>();
      } else {
        e.op = static_cast<uint8_t>(
            parse_name<CommOp, 8>(x.at("op").get<std::string>(), comm_op_name, "operation"));
        e.group = x.at("group").get<int>();
        if (e.group < 0 || e.group >= static_cast<int>(r.groups.size()))
          throw std::invalid_argument(
              fmt::format("event {} names group {} of {}", e.seq, e.group, r.groups.size()));
        e.peer = x.value("peer", -1);
        e.tag = x.value("tag", -1);
        e.bytes = x.at("bytes").get<int64_t>();
      }
      e.run = x.at("run").get<int64_t>();
      e.step = x.at("step").get<int64_t>();
      e.start_ns = x.at("start_unix_us").get<int64_t>() * 1000;
      e.end_ns = x.at("end_unix_us").get<int64_t>() * 1000;
      r.events.push_back(e);
    }
    return r;
  } catch (const std::exception& e) {
    throw FileError(fmt::format("{}: not a pipetrain flight record: {}", source, e.what()));
  }
}

std::filesystem::path flight_record_path(const std::filesystem::path& dir, int world_rank) {
  return dir / fmt::format("rank-{:05d}.json", world_rank);
}

void write_flight_record(const std::filesystem::path& dir, const FlightRecord& record) {
  const std::string text = flight_record_json(record);
  write_file_atomically(flight_record_path(dir, record.world_rank),
                        std::as_bytes(std::span(text.data(), text.size())));
}

std::vector<FlightRecord> read_flight_records(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw FileError(fmt::format("{} is not a folder of flight records", dir.string()));
  std::vector<FlightRecord> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("rank-") || !name.ends_with(".json") || !entry.is_regular_file())
      continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in && !in.eof()) throw FileError(fmt::format("cannot read {}", entry.path().string()));
    out.push_back(parse_flight_record(text.str(), entry.path().string()));
  }
  std::sort(out.begin(), out.end(), [](const FlightRecord& a, const FlightRecord& b) {
    return a.world_rank < b.world_rank;
  });
  return out;
}

FlightGroupKey flight_group_of(const FlightRecord& r, const FlightEvent& e) {
  const FlightGroup& g = r.groups.at(static_cast<size_t>(e.group));
  return {g.name, g.world_ranks};
}

bool flight_event_open(const FlightEvent& e) {
  return e.state == FlightState::started || e.state == FlightState::timed_out;
}

}  // namespace pt
