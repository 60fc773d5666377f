#include "engine/trace/timeline_svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <span>

#include "engine/io/atomic_file.h"
#include "engine/trace/bubble.h"

namespace pt {
namespace {

using sched::ActionType;

// ---- layout (pixels) ----------------------------------------------------------------------
// Each lane: a compute row on top, a thin communication row under it, so a transfer that
// overlaps compute stays visible.
constexpr double kLeft = 110;  // room for the device names
constexpr double kRight = 24;
constexpr double kTop = 44;  // title line above the lanes
constexpr double kLaneH = 36;
constexpr double kComputeY = 4, kComputeH = 22;  // within a lane
constexpr double kCommY = 28, kCommH = 5;
constexpr double kMinWidth = 1200;
constexpr double kCharW = 7;    // rough width of one 12 px sans-serif character
constexpr double kMinBoxW = 1;  // zero-length events still show as a hairline

// How each action type is drawn, one row per ActionType in enum order: its fill, the colour of
// the micro-batch number on that fill, which row of the lane, and its legend label (nullptr:
// shares the swatch of an earlier type). The boxes and the legend both read this table.
struct Style {
  ActionType type;
  const char* fill;
  const char* text;  // colour of the micro-batch number on that fill
  bool compute_row;
  const char* legend;
};

constexpr Style kStyles[] = {
    {ActionType::F, "#4c78a8", "#ffffff", true, "F forward"},
    {ActionType::B, "#59a14f", "#ffffff", true, "B backward"},
    {ActionType::I, "#8cd17d", "#1b1b1b", true, "I input grad"},
    {ActionType::W, "#1f7a6d", "#ffffff", true, "W weight grad"},
    {ActionType::SEND_F, "#9e9e9e", "#1b1b1b", false, "SEND/RECV"},
    {ActionType::RECV_F, "#9e9e9e", "#1b1b1b", false, nullptr},
    {ActionType::SEND_B, "#9e9e9e", "#1b1b1b", false, nullptr},
    {ActionType::RECV_B, "#9e9e9e", "#1b1b1b", false, nullptr},
    {ActionType::REDUCE_GRAD, "#6b6b6b", "#ffffff", false, "REDUCE_GRAD"},
    {ActionType::UPDATE, "#b07aa1", "#ffffff", false, "UPDATE"},
};

constexpr bool in_enum_order() {
  for (size_t i = 0; i < std::size(kStyles); ++i)
    if (static_cast<size_t>(kStyles[i].type) != i) return false;
  return static_cast<size_t>(ActionType::UPDATE) + 1 == std::size(kStyles);
}
static_assert(in_enum_order(), "kStyles needs one row per ActionType, in enum order");

const Style& style_of(ActionType t) { return kStyles[static_cast<size_t>(t)]; }

std::string xml_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

// A 1-2-5 tick step giving about `target` ticks over `span` (> 0).
double tick_step(double span, int target) {
  const double raw = span / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  return (norm < 1.5 ? 1 : norm < 3.5 ? 2 : norm < 7.5 ? 5 : 10) * mag;
}

// Decimals needed to print multiples of `step` exactly enough (0.25 -> 2, 5 -> 0).
int decimals_for(double step) {
  return std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
}

std::string ms(double us) { return fmt::format("{:.3f} ms", us / 1000); }

}  // namespace

std::string render_timeline_svg(const Trace& trace, int step) {
  const BubbleStats bubble = measure_bubble(trace, step);  // also checks the trace and the step
  const std::vector<TraceEvent> events = events_of_step(trace, step);
  const size_t D = trace.device_names.size();

  double t0 = events.front().start_us;
  for (const TraceEvent& e : events) t0 = std::min(t0, e.start_us);
  const double span = bubble.step_span_us > 0 ? bubble.step_span_us : 1;

  std::string title = fmt::format("step {}: span {}, bubble", step, ms(bubble.step_span_us));
  for (size_t d = 0; d < D; ++d)
    title += fmt::format("{} {} {:.1f}%", d == 0 ? "" : ",", trace.device_names[d],
                         100 * bubble.bubble_fraction[d]);

  // Wide enough for the title line; the plot takes what the labels and margins leave.
  const double width = std::max(kMinWidth, 40 + kCharW * static_cast<double>(title.size()));
  const double plot_w = width - kLeft - kRight;
  const double axis_y = kTop + kLaneH * static_cast<double>(D) + 4;
  const double height = axis_y + 56;
  auto x_of = [&](double t_us) { return kLeft + (t_us - t0) / span * plot_w; };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{:.0f}\" "
      "height=\"{:.0f}\" viewBox=\"0 0 {:.0f} {:.0f}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n",
      width, height, width, height);
  svg += fmt::format(
      "<rect class=\"background\" x=\"0\" y=\"0\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "fill=\"#ffffff\"/>\n",
      width, height);
  svg += fmt::format("<text x=\"12\" y=\"24\" font-size=\"14\">{}</text>\n", xml_escape(title));

  // ---- lanes: one per device, labelled -------------------------------------------------------
  for (size_t d = 0; d < D; ++d) {
    const double y = kTop + kLaneH * static_cast<double>(d);
    svg += fmt::format(
        "<rect class=\"lane\" x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" "
        "height=\"{:.2f}\" fill=\"{}\"/>\n",
        kLeft, y, plot_w, kLaneH, d % 2 == 0 ? "#f3f3f3" : "#fafafa");
    svg += fmt::format("<text x=\"{:.2f}\" y=\"{:.2f}\" text-anchor=\"end\">{}</text>\n", kLeft - 8,
                       y + kComputeY + kComputeH / 2 + 4, xml_escape(trace.device_names[d]));
  }

  // ---- time axis, ticks in ms since the step's first event, with grid lines ---------------------
  const double tick = tick_step(span, 8);
  const int decimals = decimals_for(tick / 1000);
  svg += fmt::format(
      "<line x1=\"{:.2f}\" y1=\"{:.2f}\" x2=\"{:.2f}\" y2=\"{:.2f}\" stroke=\"#333333\"/>\n", kLeft,
      axis_y, kLeft + plot_w, axis_y);
  for (int k = 0; k * tick <= span * (1 + 1e-9); ++k) {
    const double x = x_of(t0 + k * tick);
    svg += fmt::format(
        "<line x1=\"{:.2f}\" y1=\"{:.2f}\" x2=\"{:.2f}\" y2=\"{:.2f}\" "
        "stroke=\"#dddddd\"/>\n",
        x, kTop, x, axis_y);
    svg += fmt::format(
        "<line x1=\"{:.2f}\" y1=\"{:.2f}\" x2=\"{:.2f}\" y2=\"{:.2f}\" "
        "stroke=\"#333333\"/>\n",
        x, axis_y, x, axis_y + 5);
    svg += fmt::format("<text x=\"{:.2f}\" y=\"{:.2f}\" text-anchor=\"middle\">{:.{}f}</text>\n", x,
                       axis_y + 18, k * tick / 1000, decimals);
  }
  svg += fmt::format("<text x=\"{:.2f}\" y=\"{:.2f}\" text-anchor=\"end\">time (ms)</text>\n",
                     kLeft + plot_w, axis_y + 36);

  // ---- one box per action ------------------------------------------------------------------
  for (const TraceEvent& e : events) {
    const Style& st = style_of(e.action.type);
    const double x = x_of(e.start_us);
    const double w = std::max(kMinBoxW, x_of(e.end_us) - x);
    const double lane_y = kTop + kLaneH * e.device;
    const double y = lane_y + (st.compute_row ? kComputeY : kCommY);
    const double h = st.compute_row ? kComputeH : kCommH;
    svg += fmt::format(
        "<rect class=\"action {}\" x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" "
        "height=\"{:.2f}\" fill=\"{}\" stroke=\"#ffffff\" stroke-width=\"0.5\">"
        "<title>{} on {}: {} to {}</title></rect>\n",
        sched::type_name(e.action.type), x, y, w, h, st.fill, e.action.str(),
        xml_escape(trace.device_names[static_cast<size_t>(e.device)]), ms(e.start_us - t0),
        ms(e.end_us - t0));
    // The micro-batch number, when it fits: a pipeline diagram is read by micro-batch.
    if (st.compute_row && sched::has_microbatch(e.action.type)) {
      const std::string label = std::to_string(e.action.microbatch);
      if (w >= kCharW * static_cast<double>(label.size()) + 4)
        svg += fmt::format(
            "<text x=\"{:.2f}\" y=\"{:.2f}\" text-anchor=\"middle\" fill=\"{}\" "
            "font-size=\"11\">{}</text>\n",
            x + w / 2, y + h / 2 + 4, st.text, label);
    }
  }

  // ---- legend ------------------------------------------------------------------------------
  double lx = kLeft;
  for (const Style& entry : kStyles) {
    if (!entry.legend) continue;
    svg += fmt::format(
        "<rect class=\"legend\" x=\"{:.2f}\" y=\"{:.2f}\" width=\"12\" height=\"12\" "
        "fill=\"{}\"/>\n",
        lx, axis_y + 27, entry.fill);
    svg += fmt::format("<text x=\"{:.2f}\" y=\"{:.2f}\">{}</text>\n", lx + 16, axis_y + 37,
                       entry.legend);
    // Capitals run wider than kCharW: 8.5 px a character keeps "REDUCE_GRAD" off the next swatch.
    lx += 16 + 8.5 * static_cast<double>(std::string_view(entry.legend).size()) + 12;
  }
  svg += "</svg>\n";
  return svg;
}

void write_timeline_svg(const std::filesystem::path& path, const Trace& trace, int step) {
  const std::string svg = render_timeline_svg(trace, step);
  write_file_atomically(path, std::as_bytes(std::span(svg)));
}

}  // namespace pt
