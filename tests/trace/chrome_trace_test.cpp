// Chrome/Perfetto trace JSON: parses back, one X event per action, one named track per device,
// one flow pair per matched SEND/RECV of the same step, written atomically.
#include "engine/trace/chrome_trace.h"

#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "engine/core/error.h"
#include "sample_traces.h"

using namespace pt;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::vector<json> events_with_ph(const json& doc, const std::string& ph) {
  std::vector<json> out;
  for (const json& e : doc.at("traceEvents"))
    if (e.at("ph") == ph) out.push_back(e);
  return out;
}

}  // namespace

TEST_CASE("chrome trace: valid JSON with one complete event per action and named tracks") {
  const Trace trace = test::gpipe_2x2_trace();
  const json doc = json::parse(chrome_trace_json(trace));

  CHECK(doc.at("displayTimeUnit") == "ms");
  const auto complete = events_with_ph(doc, "X");
  REQUIRE(complete.size() == trace.events.size());

  std::map<int, std::string> track_names;
  for (const json& m : events_with_ph(doc, "M"))
    if (m.at("name") == "thread_name")
      track_names[m.at("tid").get<int>()] = m.at("args").at("name");
  CHECK(track_names == std::map<int, std::string>{{0, "cpu:0"}, {1, "cpu:1"}});

  // The first event as written: 0F0 on cpu:0, 0 .. 100 us.
  const json& f0 = complete.front();
  CHECK(f0.at("name") == "0F0");
  CHECK(f0.at("cat") == "compute");
  CHECK(f0.at("tid") == 0);
  CHECK(f0.at("ts").get<double>() == 0.0);
  CHECK(f0.at("dur").get<double>() == 100.0);
  CHECK(f0.at("args") == json{{"stage", 0}, {"microbatch", 0}, {"step", 0}});

  std::map<std::string, int> per_category;
  for (const json& e : complete) per_category[e.at("cat")]++;
  CHECK(per_category["compute"] == 8);
  CHECK(per_category["communication"] == 8);
}

TEST_CASE("chrome trace: one flow pair per SEND/RECV of the same step, send -> receive") {
  Trace trace = test::gpipe_2x2_trace();
  for (const TraceEvent& e : test::gpipe_2x2(1, 1000)) trace.events.push_back(e);
  // A send whose receive is missing (trace cut short) and a receive of another step: no arrow.
  trace.events.push_back(test::event(0, {0, sched::ActionType::SEND_F, 7}, 2000, 2010, 2));
  trace.events.push_back(test::event(1, {1, sched::ActionType::RECV_F, 7}, 2010, 2020, 3));

  const json doc = json::parse(chrome_trace_json(trace));
  const auto starts = events_with_ph(doc, "s");
  const auto finishes = events_with_ph(doc, "f");
  REQUIRE(starts.size() == 8);  // 4 pairs per step, 2 steps
  REQUIRE(finishes.size() == 8);

  std::map<int, json> start_by_id, finish_by_id;
  for (const json& s : starts) start_by_id[s.at("id").get<int>()] = s;
  for (const json& f : finishes) finish_by_id[f.at("id").get<int>()] = f;
  REQUIRE(start_by_id.size() == 8);
  for (const auto& item : start_by_id) {
    const auto& id = std::get<0>(item);
    const auto& s = std::get<1>(item);
    CAPTURE(id);
    REQUIRE(finish_by_id.count(id) == 1);
    const json& f = finish_by_id.at(id);
    CHECK(f.at("bp") == "e");
    CHECK(f.at("name") == s.at("name"));
    CHECK(f.at("cat") == s.at("cat"));
    // Activations go from cpu:0 to cpu:1, gradients back; the arrow points forward in time.
    CHECK(s.at("tid") == (s.at("name") == "activation" ? 0 : 1));
    CHECK(f.at("tid") == (s.at("name") == "activation" ? 1 : 0));
    CHECK(f.at("ts").get<double>() >= s.at("ts").get<double>());
  }
  // The first pair binds inside 0SEND_F0 (100 .. 110) and 1RECV_F0 (100 .. 110) of step 0.
  CHECK(start_by_id.at(0).at("ts").get<double>() == doctest::Approx(105));
  CHECK(finish_by_id.at(0).at("ts").get<double>() == doctest::Approx(105));
}

TEST_CASE("chrome trace: written atomically to a file that parses back; bad traces are refused") {
  std::string tmpl = (fs::temp_directory_path() / "pipetrain-trace-XXXXXX").string();
  REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
  const fs::path dir = tmpl;
  const fs::path file = dir / "trace.json";

  write_chrome_trace(file, test::gpipe_2x2_trace());
  std::ifstream in(file);
  const json doc = json::parse(in);
  CHECK(events_with_ph(doc, "X").size() == 16);
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++entries;
  CHECK(entries == 1);  // no temporary file left behind

  Trace bad = test::gpipe_2x2_trace();
  // Device 2 has no name.
  bad.events.push_back(test::event(2, {2, sched::ActionType::F, 0}, 0, 1, 0));
  CHECK_THROWS_AS(write_chrome_trace(dir / "bad.json", bad), UsageError);
  CHECK_FALSE(fs::exists(dir / "bad.json"));
  // Ends before it starts.
  bad.events.back() = test::event(1, {1, sched::ActionType::F, 0}, 5, 4, 0);
  CHECK_THROWS_AS(chrome_trace_json(bad), UsageError);
  fs::remove_all(dir);
}
