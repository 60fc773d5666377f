// The SVG timeline: one box per action of the step plus one lane per device, the device names,
// balanced tags, escaped text. Set PIPETRAIN_TRACE_SVG_DIR to keep the rendered examples.
#include "engine/trace/timeline_svg.h"

#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "sample_traces.h"

using namespace pt;
namespace fs = std::filesystem;

namespace {

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Every <tag> is closed by </tag> in nesting order (or closes itself: <tag/>). Returns "" when
// balanced, otherwise what went wrong.
std::string check_balanced(const std::string& xml) {
  std::vector<std::string> open;
  for (size_t at = xml.find('<'); at != std::string::npos; at = xml.find('<', at + 1)) {
    const size_t end = xml.find('>', at);
    if (end == std::string::npos) return "unterminated tag at " + std::to_string(at);
    const std::string tag = xml.substr(at + 1, end - at - 1);
    if (tag.empty()) return "empty tag at " + std::to_string(at);
    if (tag[0] == '?' || tag[0] == '!') continue;
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (open.empty() || open.back() != name) return "unexpected </" + name + ">";
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(tag.substr(0, tag.find_first_of(" \n\t")));
    }
  }
  return open.empty() ? "" : "unclosed <" + open.back() + ">";
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Keeps a rendered example when PIPETRAIN_TRACE_SVG_DIR is set (to look at, or convert to PNG).
void keep(const std::string& name, const Trace& trace, int step) {
  if (const char* dir = std::getenv("PIPETRAIN_TRACE_SVG_DIR"))
    write_timeline_svg(fs::path(dir) / name, trace, step);
}

}  // namespace

TEST_CASE("timeline svg: one box per action, one lane per device, names, balanced tags") {
  const Trace trace = test::gpipe_2x2_trace();
  const std::string svg = render_timeline_svg(trace, 0);
  keep("gpipe_2x2.svg", trace, 0);

  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(trimmed(svg).ends_with("</svg>"));
  CHECK(check_balanced(svg) == "");
  CHECK(count(svg, "<rect class=\"action ") == trace.events.size());
  CHECK(count(svg, "<rect class=\"lane\"") == 2);
  CHECK(count(svg, "class=\"action F\"") == 4);
  CHECK(count(svg, "class=\"action SEND_F\"") == 2);
  CHECK(svg.find(">cpu:0</text>") != std::string::npos);
  CHECK(svg.find(">cpu:1</text>") != std::string::npos);
  CHECK(svg.find("span 0.940 ms") != std::string::npos);
  CHECK(svg.find("cpu:0 36.2%") != std::string::npos);  // 1 - 600/940
  CHECK(svg.find("<script") == std::string::npos);
}

TEST_CASE("timeline svg: only the asked step; names escaped; a missing step is refused") {
  Trace trace = test::gpipe_2x2_trace();
  for (const TraceEvent& e : test::gpipe_2x2(1, 1000)) trace.events.push_back(e);
  trace.events.push_back(test::event(1, {1, sched::ActionType::W, 1}, 1940, 1990, 1));
  trace.device_names = {"cuda:0 <A&B>", "cuda:1 \"x\""};

  const std::string svg = render_timeline_svg(trace, 1);
  keep("gpipe_2x2_step1.svg", trace, 1);
  CHECK(count(svg, "<rect class=\"action ") == 17);  // 16 of step 1 + the W
  CHECK(count(svg, "class=\"action W\"") == 1);
  CHECK(svg.find("cuda:0 &lt;A&amp;B&gt;") != std::string::npos);
  CHECK(svg.find("cuda:1 &quot;x&quot;") != std::string::npos);
  CHECK(svg.find("<A&B>") == std::string::npos);
  CHECK(check_balanced(svg) == "");
  CHECK_THROWS_AS(render_timeline_svg(trace, 5), UsageError);
}

TEST_CASE("timeline svg: a simulated timeline via make_trace, written atomically") {
  using T = sched::ActionType;
  // A simulator's timeline in abstract units (1 unit = 1 ms): 1F1B-like split backward on 3
  // devices.
  std::vector<std::vector<sched::TimedAction>> timeline(3);
  size_t actions = 0;
  for (int d = 0; d < 3; ++d)
    for (int m = 0; m < 4; ++m) {
      const double f = (d + m) * 1000.0;
      const double b = 6000.0 + (2 - d + m) * 1000.0;
      auto& list = timeline[static_cast<size_t>(d)];
      list.push_back({{d, T::F, m}, f, f + 1000});
      list.push_back({{d, T::I, m}, b, b + 500});
      list.push_back({{d, T::W, m}, b + 500, b + 1000});
      actions += 3;
    }
  const Trace trace = make_trace(default_device_names(3, "sim"), timeline, 0);
  CHECK(trace.device_names == std::vector<std::string>{"sim:0", "sim:1", "sim:2"});

  std::string tmpl = (fs::temp_directory_path() / "pipetrain-svg-XXXXXX").string();
  REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
  const fs::path file = fs::path(tmpl) / "timeline.svg";
  write_timeline_svg(file, trace, 0);
  keep("simulated_3x4.svg", trace, 0);
  std::stringstream text;
  text << std::ifstream(file).rdbuf();
  CHECK(text.str() == render_timeline_svg(trace, 0));
  CHECK(count(text.str(), "<rect class=\"action ") == actions);
  CHECK(count(text.str(), "<rect class=\"lane\"") == 3);
  CHECK(check_balanced(text.str()) == "");
  fs::remove_all(tmpl);

  // make_trace checks what it builds: a fourth device's timeline with three names, a box that
  // ends before it starts.
  timeline.push_back({{{3, T::F, 0}, 0, 1}});
  CHECK_THROWS_AS(make_trace(default_device_names(3), timeline), UsageError);
  timeline.pop_back();
  timeline[0].push_back({{0, T::F, 9}, 2, 1});
  CHECK_THROWS_AS(make_trace(default_device_names(3), timeline), UsageError);
}
