#include "engine/plan/schedule_choice.h"

#include <charconv>

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

ScheduleChoice ScheduleChoice::parse(std::string_view text) {
  using K = Kind;
  if (text == "gpipe") return {K::gpipe, 1, {}};
  if (text == "1f1b") return {K::one_f_one_b, 1, {}};
  if (text == "zb-h1") return {K::zb_h1, 1, {}};
  if (text == "zb-h2") return {K::zb_h2, 1, {}};
  if (text == "zbv") return {K::zbv, 1, {}};
  if (text == "v-half") return {K::v_half, 1, {}};
  if (text == "v-min") return {K::v_min, 1, {}};
  if (text == "dualpipev") return {K::dualpipev, 1, {}};
  if (text.starts_with("interleaved:")) {
    const std::string_view v_text = text.substr(std::string_view("interleaved:").size());
    int V = 0;
    const auto [end, ec] = std::from_chars(v_text.data(), v_text.data() + v_text.size(), V);
    if (ec != std::errc() || end != v_text.data() + v_text.size() || V < 1)
      throw UsageError(
          fmt::format("schedule '{}': the number of chunks per device V must be an integer >= 1, "
                      "as in interleaved:2",
                      text));
    return {K::interleaved, V, {}};
  }
  if (text.starts_with("file:")) {
    if (text.size() == 5)
      throw UsageError("schedule 'file:' names no file: give its path, as in file:my_schedule.txt");
    return {K::file, 1, std::string(text.substr(5))};
  }
  throw UsageError(fmt::format(
      "unknown schedule '{}': use gpipe, 1f1b, interleaved:V (V chunks per device), zb-h1, "
      "zb-h2, zbv, v-half, v-min (2 chunks per device in a V), dualpipev or file:PATH (a "
      "schedule written by hand)",
      text));
}

std::string ScheduleChoice::str() const {
  switch (kind) {
    case Kind::gpipe: return "gpipe";
    case Kind::one_f_one_b: return "1f1b";
    case Kind::interleaved: return fmt::format("interleaved:{}", chunks);
    case Kind::zb_h1: return "zb-h1";
    case Kind::zb_h2: return "zb-h2";
    case Kind::zbv: return "zbv";
    case Kind::v_half: return "v-half";
    case Kind::v_min: return "v-min";
    case Kind::dualpipev: return "dualpipev";
    case Kind::file: return "file:" + path;
  }
  return "?";
}

}  // namespace pt
