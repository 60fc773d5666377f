#include "engine/partition/min_max_split.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace pt {

std::vector<int> min_max_split(int L, int S, const StageCostFn& cost) {
  if (S < 1 || S > L) throw std::invalid_argument("min_max_split needs 1 <= S <= L");
  constexpr double inf = std::numeric_limits<double>::infinity();
  const auto n = static_cast<size_t>(L) + 1;
  // best[s][j]: the smallest possible largest cost when stages 0..s-1 hold layers [0, j);
  // cut[s][j]: where stage s-1 starts in that optimum.
  std::vector<std::vector<double>> best(static_cast<size_t>(S) + 1, std::vector<double>(n, inf));
  std::vector<std::vector<int>> cut(static_cast<size_t>(S) + 1, std::vector<int>(n, -1));
  best[0][0] = 0;
  for (int s = 1; s <= S; ++s) {
    // Stage s-1 ends at j; the s-1 stages before it need >= s-1 layers and the S-s stages
    // after it need >= S-s layers.
    for (int j = s; j <= L - (S - s); ++j) {
      double b = inf;
      int at = -1;
      for (int i = s - 1; i < j; ++i) {
        const double prev = best[static_cast<size_t>(s - 1)][static_cast<size_t>(i)];
        if (prev == inf) continue;
        const double c = std::max(prev, cost(s - 1, i, j));
        if (c < b) {  // strict: ties keep the earliest cut
          b = c;
          at = i;
        }
      }
      best[static_cast<size_t>(s)][static_cast<size_t>(j)] = b;
      cut[static_cast<size_t>(s)][static_cast<size_t>(j)] = at;
    }
  }
  if (best[static_cast<size_t>(S)][static_cast<size_t>(L)] == inf) return {};
  std::vector<int> bounds(static_cast<size_t>(S) + 1);
  bounds[static_cast<size_t>(S)] = L;
  for (int s = S; s >= 1; --s)
    bounds[static_cast<size_t>(s - 1)] =
        cut[static_cast<size_t>(s)][static_cast<size_t>(bounds[static_cast<size_t>(s)])];
  return bounds;
}

}  // namespace pt
