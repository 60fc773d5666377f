// Golden schedules: the exact action lists of small cases, compute-only and lowered, compared
// with files that were checked by hand against the papers' diagrams (see each file's comments).
// To rewrite them after a deliberate change, run with PIPETRAIN_UPDATE_GOLDEN=1 (the comment
// block at the top of each file is kept), then read the diff before committing.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "schedule/generators.h"
#include "schedule/lowering.h"
#include "schedule/text_format.h"
#include "schedule/validate.h"

using namespace pt::sched;

namespace {

// From the build (not __FILE__, which a compiler cache may rewrite relative to another folder).
const std::filesystem::path kGoldenDir = std::filesystem::path(PIPETRAIN_SCHEDULE_GOLDEN_DIR);

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The leading comment block, and the rest without comment or blank lines.
std::pair<std::string, std::string> split_golden(const std::string& text) {
  std::string comments, body;
  std::istringstream in(text);
  bool leading = true;
  for (std::string line; std::getline(in, line);) {
    const bool comment = line.empty() || line[0] == '#';
    if (leading && comment) {
      comments += line + "\n";
      continue;
    }
    leading = false;
    if (!comment) body += line + "\n";
  }
  return {comments, body};
}

// First difference, action by action, in words.
std::string first_difference(const Schedule& want, const Schedule& got) {
  for (size_t d = 0; d < want.actions.size() && d < got.actions.size(); ++d) {
    const auto& w = want.actions[d];
    const auto& g = got.actions[d];
    for (size_t k = 0; k < w.size() || k < g.size(); ++k) {
      const std::string ws = k < w.size() ? w[k].str() : "(end)";
      const std::string gs = k < g.size() ? g[k].str() : "(end)";
      if (ws != gs)
        return "device " + std::to_string(d) + " step " + std::to_string(k) + ": golden " + ws +
               ", generated " + gs;
    }
  }
  return "header or placement differs";
}

void check_golden(const std::string& file, const Schedule& generated) {
  CAPTURE(file);
  const auto path = kGoldenDir / file;
  const std::string text = to_text(generated);
  if (std::getenv("PIPETRAIN_UPDATE_GOLDEN")) {
    const auto [comments, body] = std::filesystem::exists(path)
                                      ? split_golden(read_file(path))
                                      : std::pair<std::string, std::string>{};
    std::ofstream(path, std::ios::binary) << comments << text;
    MESSAGE("rewrote " << path.string());
  }
  REQUIRE_MESSAGE(std::filesystem::exists(path), "missing golden file " << path.string());
  const std::string golden_text = read_file(path);
  const auto [comments, body] = split_golden(golden_text);
  const Schedule golden = parse_schedule_text(golden_text, path.string());
  CHECK_MESSAGE(body == text, first_difference(golden, generated));
  CHECK(golden == generated);
  const Validation v = validate(golden);
  CHECK_MESSAGE(v.ok(), v.report);
}

void check_both(const std::string& stem, const Schedule& compute_only) {
  check_golden(stem + ".txt", compute_only);
  check_golden(stem + "_lowered.txt", add_communication(compute_only));
}

}  // namespace

TEST_CASE("golden: gpipe D=2 M=3") { check_both("gpipe_d2_m3", gpipe(2, 3)); }
TEST_CASE("golden: 1f1b D=3 M=4") { check_both("1f1b_d3_m4", one_f_one_b(3, 4)); }
TEST_CASE("golden: 1f1b D=4 M=2 (M < D)") { check_both("1f1b_d4_m2", one_f_one_b(4, 2)); }
TEST_CASE("golden: interleaved D=2 M=4 V=2") {
  check_both("interleaved_d2_m4_v2", interleaved(2, 4, 2));
}
TEST_CASE("golden: zb-h1 D=3 M=4") { check_both("zb-h1_d3_m4", zb_h1(3, 4)); }
TEST_CASE("golden: dualpipev D=2 M=4") { check_both("dualpipev_d2_m4", dualpipev(2, 4)); }
TEST_CASE("golden: zbv D=2 M=4") { check_both("zbv_d2_m4", zbv(2, 4)); }
TEST_CASE("golden: v-half D=3 M=6") { check_both("v-half_d3_m6", v_half(3, 6)); }
TEST_CASE("golden: v-min D=4 M=4") { check_both("v-min_d4_m4", v_min(4, 4)); }
TEST_CASE("golden: zb-h2 D=3 M=5 (M = 2D - 1)") { check_both("zb-h2_d3_m5", zb_h2(3, 5)); }
TEST_CASE("golden: interleaved D=2 M=5 V=2 (M not a multiple of D)") {
  check_both("interleaved_d2_m5_v2", interleaved(2, 5, 2));
}
