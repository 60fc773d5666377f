#pragma once
// One rank's flight record as a file: DIR/rank-00002.json, written atomically (a reader never
// sees half of one), read back by pipetrain-hang. The events' times are converted to Unix
// nanoseconds when the record is taken, so the records of processes (and hosts with synchronised
// clocks) can be laid side by side.
//
//   {"format": "pipetrain-flight-record", "version": 1, "world_rank": 2, "world_size": 4,
//    "pid": 1234, "reason": "...", "written_unix_us": ..., "capacity": 4096,
//    "groups": [{"name": "pipeline of replica 1", "world_ranks": [2, 3]}, ...],
//    "action_lists": [{"list": "training", "device": 2, "label": "...", "actions": ["0F0", ...]}],
//    "events": [{"seq": 7, "kind": "action", "state": "finished", "action": "0F0",
//                "list": "training", "device": 2, "index": 0, "run": 3, "step": 1,
//                "start_unix_us": ..., "end_unix_us": ...},
//               {"seq": 8, "kind": "send", "op": "isend", "state": "started", "group": 0,
//                "peer": 3, "tag": 6, "bytes": 64, ...}]}
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/trace/flight_recorder.h"

namespace pt {

struct FlightRecord {
  int world_rank = 0, world_size = 1;
  int64_t pid = 0;
  std::string reason;           // why it was written: "SIGUSR1", the error, ...
  int64_t written_unix_ns = 0;  // when
  int64_t capacity = 0;         // of the ring: older events are lost
  std::vector<FlightGroup> groups;
  std::vector<FlightActionList> lists;
  std::vector<FlightEvent> events;  // oldest first; times in Unix nanoseconds (0: none)
};

// The recorder's events and tables now.
FlightRecord capture_flight_record(const FlightRecorder& recorder, int world_rank, int world_size,
                                   std::string reason);

std::string flight_record_json(const FlightRecord& record);
// Throws FileError naming `source` when `text` is not a flight record.
FlightRecord parse_flight_record(std::string_view text, const std::string& source);

// DIR/rank-00002.json.
std::filesystem::path flight_record_path(const std::filesystem::path& dir, int world_rank);
// Atomically (engine/io/atomic_file.h).
void write_flight_record(const std::filesystem::path& dir, const FlightRecord& record);
// Every DIR/rank-*.json, by world rank; throws FileError for a file that is not a record.
std::vector<FlightRecord> read_flight_records(const std::filesystem::path& dir);

// The text of an action event ("1RECV_F0") or a communication call ("recv").
std::string flight_event_name(const FlightEvent& e);

// The group of a communication event as every member names it, its name and world ranks (its
// index into FlightRecord::groups differs between the records).
using FlightGroupKey = std::pair<std::string, std::vector<int>>;
FlightGroupKey flight_group_of(const FlightRecord& r, const FlightEvent& e);

// Still in its call when the record was written, or gave up waiting (timed out).
bool flight_event_open(const FlightEvent& e);

}  // namespace pt
