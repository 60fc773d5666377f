#pragma once
// Which schedule a pipeline run uses, parsed once from its text form:
//   gpipe | 1f1b | interleaved:V | zb-h1 | zb-h2 | zbv | v-half | v-min | dualpipev | file:PATH
// The plan (plan.h) turns it into action lists: a generator of schedule/generators.h, or the
// hand-written file.
#include <string>
#include <string_view>

namespace pt {

struct ScheduleChoice {
  enum class Kind {
    gpipe,
    one_f_one_b,
    interleaved,
    zb_h1,
    zb_h2,
    zbv,
    v_half,
    v_min,
    dualpipev,
    file
  };
  Kind kind = Kind::one_f_one_b;
  int chunks = 1;    // V model chunks per device, for Kind::interleaved (>= 1)
  std::string path;  // for Kind::file

  // Throws UsageError naming the valid forms.
  static ScheduleChoice parse(std::string_view text);
  std::string str() const;  // the text parse() reads back: "1f1b", "interleaved:2", "file:s.txt"
  // The V placements (zbv, v-half, v-min, dualpipev): two stages on every device, so pipelined
  // even on one device, and never one stage per worker process.
  bool v_shape() const {
    return kind == Kind::zbv || kind == Kind::v_half || kind == Kind::v_min ||
           kind == Kind::dualpipev;
  }
  bool operator==(const ScheduleChoice&) const = default;
};

}  // namespace pt
