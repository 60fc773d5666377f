#include <charconv>
#include <stdexcept>

#include "schedule/generator_args.h"
#include "schedule/generators.h"
#include "schedule/text_format.h"

namespace pt::sched {

namespace {

std::string valid_names() {
  std::string out;
  for (const std::string& name : schedule_names()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// "file:PATH": a hand-written compute-only schedule, checked against the run's D and M.
Schedule from_file(std::string_view path, int D, int M) {
  Schedule s = read_schedule_file(std::string(path));  // parses and validates
  if (s.num_devices != D || s.microbatches != M)
    throw std::invalid_argument("schedule file '" + std::string(path) +
                                "' is for devices=" + std::to_string(s.num_devices) +
                                " microbatches=" + std::to_string(s.microbatches) +
                                ", but this run has devices=" + std::to_string(D) +
                                " microbatches=" + std::to_string(M) +
                                ": change the run or the file's 'pipeline' line");
  for (const auto& list : s.actions)
    for (const Action& a : list)
      if (!is_compute(a.type))
        throw std::invalid_argument("schedule file '" + std::string(path) + "' holds " + a.str() +
                                    ": write compute actions only (F, B, I, W); communication, "
                                    "gradient reduction and steps are added by lowering");
  return s;
}

}  // namespace

std::vector<std::string> schedule_names() {
  return {"gpipe", "1f1b",   "interleaved:V", "zb-h1",     "zb-h2",
          "zbv",   "v-half", "v-min",         "dualpipev", "file:PATH"};
}

Schedule generate(std::string_view name, int D, int M) {
  detail::require_shape(name.empty() ? "the" : std::string(name), D, M);
  if (name == "gpipe") return gpipe(D, M);
  if (name == "1f1b") return one_f_one_b(D, M);
  if (name == "zb-h1") return zb_h1(D, M);
  if (name == "zb-h2") return zb_h2(D, M);
  if (name == "zbv") return zbv(D, M);
  if (name == "v-half") return v_half(D, M);
  if (name == "v-min") return v_min(D, M);
  if (name == "dualpipev") return dualpipev(D, M);
  if (name.starts_with("interleaved:")) {
    const std::string_view v_text = name.substr(std::string_view("interleaved:").size());
    int V = 0;
    const auto [end, ec] = std::from_chars(v_text.data(), v_text.data() + v_text.size(), V);
    if (ec != std::errc() || end != v_text.data() + v_text.size() || V < 1)
      throw std::invalid_argument("'" + std::string(name) +
                                  "': the number of chunks per device V must be an integer >= 1, "
                                  "as in interleaved:2");
    return interleaved(D, M, V);
  }
  if (name.starts_with("file:")) return from_file(name.substr(5), D, M);
  throw std::invalid_argument("unknown schedule '" + std::string(name) +
                              "'; valid: " + valid_names());
}

}  // namespace pt::sched
