#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>

#include "schedule/generator_args.h"
#include "schedule/generators.h"

namespace pt::sched {

// V-shaped schedules: zbv (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", ZB-V), v-half and
// v-min (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"). Two chunks per device
// placed in a V: stage k on device k for k < D, on device 2D - 1 - k for k >= D, so device d holds
// stages d (chunk 0, on the way down) and 2D - 1 - d (chunk 1, on the way back). Device 0 holds
// the first and the last stage; stages D - 1 and D meet on device D - 1 (a local hand-off).
//
// The three differ only in the activation memory a device may hold, counted in chunk
// activations (F done, W not; a chunk is half a 1F1B stage, so 1F1B's device 0 holds 2D):
//
//   zbv      2D                              1F1B's peak
//   v-half   min(2D, D + 2)                  the paper's (D+2)/2 micro-batches (not rounded down)
//   v-min    min(2D, 2 floor((D+4)/3) + 1)   the paper's (D+4)//3 micro-batches, + 1 chunk
//
// We build them with a greedy list scheduler under that limit, not with the paper's building
// blocks (whose offsets depend on D mod 3 and on the F/B/W ratios). In unit time (F = I = W = 1
// per chunk), every free device starts, among the actions whose dependencies have finished:
//   1. an F, if the device's in-flight count stays within the limit,
//   2. else an I (input gradient: the critical path back to stage 0),
//   3. else a W (weight gradient: frees one activation; fills the bubbles);
// each stage's F, I and W in ascending micro-batch order (so the W's are, as generators.h
// requires). zbv breaks ties by micro-batch, then chunk 1 first; v-half and v-min by chunk 1
// first (it finishes a micro-batch's forward, whose backward then frees memory), then by
// micro-batch, and keep one slot free when starting a chunk-0 F so that the same micro-batch's
// chunk-1 F can follow (without it the tight limits deadlock). What the simulator measures with
// F = I = W = 1 (tests/schedule/simulate_test.cpp; step time in chunk units, bubble
// 1 - 6M / step):
//
//   zbv      step 6M + D - 1 for every M >= 2D: only the unavoidable fill (device D - 1 cannot
//            start before D - 1 forwards ran); the ZB paper's (D-1)(F+B-2W) = 0 up to that fill
//   v-half   bubble 0.43-1.23x the paper's D / 2M at M = 8D (D = 3..8; D = 8: 7.7% vs 6.3%)
//   v-min    bubble 0.32-1.39x the paper's 2D / 3M at M = 8D (D = 3..8; D = 8: 9.4% vs 8.3%)
//
// At exactly the paper's rounded-down memory the greedy keeps a bubble that does not shrink with
// M where the rounding bites (v-min at D = 6, M = 48: 19%, 1F1B 9%; v-half at odd D: ~10%): the
// paper's exact memory there needs its hand-placed blocks; one more chunk is enough for ours.
// Every shape the scheduler cannot finish would throw std::logic_error; the sweep
// (D = 1..6, M = 1..16) finishes them all and the validator's dry run agrees.

namespace {

struct VPolicy {
  int memory_limit = 1;             // chunk activations per device
  bool microbatch_first = false;    // tie-break order: (m, chunk) or (chunk, m)
  bool reserve_for_chunk1 = false;  // a chunk-0 F needs two free slots
};

Schedule v_greedy(std::string_view name, int D, int M, const VPolicy& policy) {
  detail::require_shape(name, D, M);
  const int S = 2 * D;
  Schedule s = empty_schedule(D, S, M);
  for (int k = 0; k < S; ++k) s.stage_device[static_cast<size_t>(k)] = k < D ? k : S - 1 - k;

  // End times (unit steps) of each stage's F and I per micro-batch; -1: not run.
  std::vector<std::vector<int>> f_end(static_cast<size_t>(S), std::vector<int>(M, -1));
  std::vector<std::vector<int>> i_end = f_end;
  std::vector<int> next_f(static_cast<size_t>(S), 0), next_i = next_f, next_w = next_f;
  std::vector<int> inflight(static_cast<size_t>(D), 0);
  const auto at = [](std::vector<std::vector<int>>& table, int stage, int m) -> int& {
    return table[static_cast<size_t>(stage)][static_cast<size_t>(m)];
  };
  const auto finished = [&](std::vector<std::vector<int>>& table, int stage, int m, int t) {
    const int end = at(table, stage, m);
    return end >= 0 && end <= t;
  };

  const long long total = 3LL * S * M;
  long long done = 0;
  for (int t = 0; done < total; ++t) {
    bool acted = false;
    for (int d = 0; d < D; ++d) {
      // Candidates as (type rank, tie-break, tie-break, action): F = 0, I = 1, W = 2.
      std::vector<std::tuple<int, int, int, Action>> ready;
      const std::array<int, 2> stages{S - 1 - d, d};  // chunk 1 first
      for (int c = 0; c < 2; ++c) {
        const int st = stages[static_cast<size_t>(c)];
        const auto push = [&](int rank, ActionType type, int m) {
          ready.push_back(policy.microbatch_first ? std::tuple{rank, m, c, Action{st, type, m}}
                                                  : std::tuple{rank, c, m, Action{st, type, m}});
        };
        const int need = (st < D && policy.reserve_for_chunk1) ? 2 : 1;
        if (const int m = next_f[static_cast<size_t>(st)];
            m < M && (st == 0 || finished(f_end, st - 1, m, t)) &&
            inflight[static_cast<size_t>(d)] + need <= policy.memory_limit)
          push(0, ActionType::F, m);
        if (const int m = next_i[static_cast<size_t>(st)];
            m < next_f[static_cast<size_t>(st)] && finished(f_end, st, m, t) &&
            (st == S - 1 || finished(i_end, st + 1, m, t)))
          push(1, ActionType::I, m);
        if (const int m = next_w[static_cast<size_t>(st)];
            m < next_i[static_cast<size_t>(st)] && finished(i_end, st, m, t))
          push(2, ActionType::W, m);
      }
      if (ready.empty()) continue;
      const Action a = std::get<3>(
          *std::min_element(ready.begin(), ready.end(), [](const auto& x, const auto& y) {
            return std::tie(std::get<0>(x), std::get<1>(x), std::get<2>(x)) <
                   std::tie(std::get<0>(y), std::get<1>(y), std::get<2>(y));
          }));
      const auto st = static_cast<size_t>(a.stage);
      switch (a.type) {
        case ActionType::F:
          at(f_end, a.stage, next_f[st]++) = t + 1;
          ++inflight[static_cast<size_t>(d)];
          break;
        case ActionType::I: at(i_end, a.stage, next_i[st]++) = t + 1; break;
        default:
          ++next_w[st];
          --inflight[static_cast<size_t>(d)];
          break;
      }
      s.actions[static_cast<size_t>(d)].push_back(a);
      ++done;
      acted = true;
    }
    // Nothing ran at t, so nothing finishes later than t: nothing will ever become ready.
    if (!acted)
      throw std::logic_error(std::string(name) + ": the greedy V scheduler stalled at D = " +
                             std::to_string(D) + ", M = " + std::to_string(M) + " after " +
                             std::to_string(done) + " of " + std::to_string(total) + " actions");
  }
  return s;
}

}  // namespace

Schedule zbv(int D, int M) { return v_greedy("zbv", D, M, {2 * D, true, false}); }

Schedule v_half(int D, int M) {
  return v_greedy("v-half", D, M, {std::min(2 * D, D + 2), false, true});
}

Schedule v_min(int D, int M) {
  return v_greedy("v-min", D, M, {std::min(2 * D, 2 * ((D + 4) / 3) + 1), false, true});
}

}  // namespace pt::sched
