#include "schedule/simulate.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "schedule/dry_run.h"
#include "schedule/validate.h"

namespace pt::sched {

namespace {

// A per-stage (or per-boundary) table given as one entry per item, one entry for all, or none.
template <typename T>
T pick(const std::vector<T>& table, int k, const T& fallback) {
  if (table.empty()) return fallback;
  if (table.size() == 1) return table[0];
  return table.at(static_cast<size_t>(k));
}

double duration(const Action& a, const StageTimes& t) {
  switch (a.type) {
    case ActionType::F: return t.f;
    case ActionType::B: return t.b >= 0.0 ? t.b : t.i + t.w;
    case ActionType::I: return t.i;
    case ActionType::W: return t.w;
    default: return 0.0;
  }
}

void check_config(const Schedule& schedule, const SimConfig& config) {
  const size_t S = static_cast<size_t>(schedule.num_stages);
  if (config.stages.size() > 1 && config.stages.size() != S)
    throw std::invalid_argument("simulate: " + std::to_string(config.stages.size()) +
                                " stage times for " + std::to_string(S) +
                                " stages; give one per stage, or one for all");
  const size_t boundaries = S > 0 ? S - 1 : 0;
  if (config.transfer.size() > 1 && config.transfer.size() != boundaries)
    throw std::invalid_argument("simulate: " + std::to_string(config.transfer.size()) +
                                " transfer times for " + std::to_string(boundaries) +
                                " stage boundaries; give one per boundary, or one for all");
}

}  // namespace

double SimResult::mean_bubble_fraction() const {
  if (bubble_fraction.empty()) return 0.0;
  double sum = 0.0;
  for (double b : bubble_fraction) sum += b;
  return sum / static_cast<double>(bubble_fraction.size());
}

SimResult simulate(const Schedule& schedule, const SimConfig& config) {
  require_valid(schedule);
  check_config(schedule, config);
  const size_t D = schedule.actions.size();

  // The clock runs in seconds; `end_s` holds each action's end, and the timeline gets the
  // microseconds (the one conversion) as each action is timed.
  SimResult r;
  r.timeline.resize(D);
  r.busy.assign(D, 0.0);
  std::vector<std::vector<double>> end_s(D);
  for (size_t d = 0; d < D; ++d) {
    r.timeline[d].resize(schedule.actions[d].size());
    end_s[d].assign(schedule.actions[d].size(), 0.0);
    for (size_t k = 0; k < schedule.actions[d].size(); ++k)
      r.timeline[d][k].action = schedule.actions[d][k];
  }
  std::vector<double> device_free(D, 0.0);

  auto timed = [&](Slot s) -> TimedAction& {
    return r.timeline[static_cast<size_t>(s.device)][static_cast<size_t>(s.index)];
  };
  auto end_of = [&](Slot s) -> double& {
    return end_s[static_cast<size_t>(s.device)][static_cast<size_t>(s.index)];
  };
  const DryRunResult run =
      dry_run(schedule, infer_form(schedule), [&](Slot self, std::span<const Slot> deps) {
        TimedAction& t = timed(self);
        double start = device_free[static_cast<size_t>(self.device)];
        for (const Slot& dep_slot : deps) {
          double ready = end_of(dep_slot);
          if (dep_slot.device != self.device) {
            const int boundary = std::min(timed(dep_slot).action.stage, t.action.stage);
            ready += pick(config.transfer, boundary, 0.0);
          }
          start = std::max(start, ready);
        }
        const double time = duration(t.action, pick(config.stages, t.action.stage, StageTimes{}));
        const double end = start + time;
        end_of(self) = end;
        t.start_us = start * kMicrosecondsPerSecond;
        t.end_us = end * kMicrosecondsPerSecond;
        device_free[static_cast<size_t>(self.device)] = end;
        r.step_time = std::max(r.step_time, end);
        if (is_compute(t.action.type)) r.busy[static_cast<size_t>(self.device)] += time;
      });
  if (!run.completed) throw std::logic_error("simulate: dry run stalled on a validated schedule");

  r.bubble_fraction.resize(D);
  for (size_t d = 0; d < D; ++d)
    r.bubble_fraction[d] = r.step_time > 0.0 ? 1.0 - r.busy[d] / r.step_time : 0.0;

  r.peak_inflight.assign(static_cast<size_t>(schedule.num_stages), 0);
  std::vector<int> inflight(static_cast<size_t>(schedule.num_stages), 0);
  for (const auto& list : schedule.actions)
    for (const Action& a : list) {
      int& now = inflight[static_cast<size_t>(a.stage)];
      if (a.type == ActionType::F) {
        ++now;
        r.peak_inflight[static_cast<size_t>(a.stage)] =
            std::max(r.peak_inflight[static_cast<size_t>(a.stage)], now);
      }
      if (a.type == ActionType::W || a.type == ActionType::B) --now;
    }
  for (long long p : peak_device_activation_bytes(
           schedule, std::vector<long long>(static_cast<size_t>(schedule.num_stages), 1)))
    r.peak_inflight_device.push_back(static_cast<int>(p));
  return r;
}

std::vector<long long> peak_device_activation_bytes(const Schedule& schedule,
                                                    const std::vector<long long>& stage_bytes) {
  if (stage_bytes.size() != static_cast<size_t>(schedule.num_stages))
    throw std::invalid_argument(
        "peak_device_activation_bytes: " + std::to_string(stage_bytes.size()) +
        " stage sizes for " + std::to_string(schedule.num_stages) + " stages");
  std::vector<long long> peak;
  for (const auto& list : schedule.actions) {
    // Saturating at the largest long long (sizes >= 0): a planner's sizes from a cost file's
    // maxima overflow, and a wrapped sum was a negative peak that fit every memory cap. Once
    // saturated, `high` stays there whatever `now` does after.
    long long now = 0, high = 0;
    for (const Action& a : list) {
      if (a.stage < 0 || a.stage >= schedule.num_stages) continue;  // the validator reports it
      const long long bytes = stage_bytes[static_cast<size_t>(a.stage)];
      if (a.type == ActionType::F) {
        if (__builtin_add_overflow(now, bytes, &now)) now = std::numeric_limits<long long>::max();
        high = std::max(high, now);
      }
      if (a.type == ActionType::W || a.type == ActionType::B) now -= bytes;
    }
    peak.push_back(high);
  }
  return peak;
}

double analytic_bubble(std::string_view name, int D, int M, int V) {
  if (D < 1 || M < 1) throw std::invalid_argument("analytic_bubble: needs D >= 1 and M >= 1");
  const double d = D - 1, m = M;
  if (name == "gpipe" || name == "1f1b") return d / (m + d);
  if (name == "zb-h1" || name == "zb-h2" || name == "dualpipev") return d / (3.0 * m + d);
  if (name == "zbv") return d / (6.0 * m + d);
  if (name == "v-half") return D / (2.0 * m);
  if (name == "v-min") return 2.0 * D / (3.0 * m);
  if (name == "interleaved" || name.starts_with("interleaved:")) {
    if (name.starts_with("interleaved:")) {
      const std::string_view v = name.substr(12);
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), V);
      if (ec != std::errc() || end != v.data() + v.size())
        throw std::invalid_argument("analytic_bubble: bad chunk count in '" + std::string(name) +
                                    "'");
    }
    if (V < 1) throw std::invalid_argument("analytic_bubble: needs V >= 1");
    const double v = V;
    if (M < D) return (v * (D - m) + m - 1.0) / (v * D + m - 1.0);  // one group, waits per chunk
    return d / (v * m + d);
  }
  throw std::invalid_argument("analytic_bubble: no formula for '" + std::string(name) +
                              "' (known: gpipe, 1f1b, interleaved:V, zb-h1, zb-h2, zbv, v-half, "
                              "v-min, dualpipev)");
}

std::string render_timeline(const SimResult& result, double unit) {
  if (!(unit > 0.0)) throw std::invalid_argument("render_timeline: unit must be > 0");
  if (result.timeline.empty()) return "";
  const auto cell_of = [&](double t) { return static_cast<size_t>(std::floor(t / unit + 1e-9)); };
  const size_t columns =
      cell_of(result.step_time) + (std::fmod(result.step_time, unit) > 1e-9 ? 1 : 0);
  std::vector<std::vector<std::string>> grid(result.timeline.size(),
                                             std::vector<std::string>(columns, "."));
  size_t width = std::to_string(columns).size();
  for (size_t d = 0; d < result.timeline.size(); ++d)
    for (const TimedAction& t : result.timeline[d]) {
      if (t.end_us <= t.start_us) continue;
      const double start = t.start_us / kMicrosecondsPerSecond;
      const double end = t.end_us / kMicrosecondsPerSecond;
      const size_t first = cell_of(start);
      const auto end_cell = static_cast<size_t>(std::ceil(end / unit - 1e-9));
      const size_t last = std::max(first + 1, end_cell);
      for (size_t c = first; c < last && c < columns; ++c)
        grid[d][c] = c == first ? t.action.str() : "---";
      width = std::max(width, t.action.str().size());
    }
  const std::string label_last = "device " + std::to_string(result.timeline.size() - 1);
  const size_t label = label_last.size();
  auto padded = [](std::string s, size_t w) {
    s.resize(std::max(s.size(), w), ' ');
    return s;
  };
  std::string out = padded("t", label);
  for (size_t c = 0; c < columns; ++c) out += "  " + padded(std::to_string(c), width);
  while (!out.empty() && out.back() == ' ') out.pop_back();
  out += '\n';
  for (size_t d = 0; d < grid.size(); ++d) {
    std::string row = padded("device " + std::to_string(d), label);
    for (size_t c = 0; c < columns; ++c) row += "  " + padded(grid[d][c], width);
    while (!row.empty() && row.back() == ' ') row.pop_back();
    out += row + '\n';
  }
  return out;
}

}  // namespace pt::sched
