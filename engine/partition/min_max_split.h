#pragma once
// The linear-partition problem: cut L layers into S contiguous, non-empty stages so that the
// largest stage cost is as small as possible. Every balancing method of the partitioner (by
// parameters, by time, by time under a memory cap) is this one search with another cost.
#include <functional>
#include <vector>

namespace pt {

// The cost of stage s holding layers [first, last); +infinity means "not allowed" (e.g. over a
// memory cap). It may depend on s (stages keep different numbers of micro-batches in flight).
using StageCostFn = std::function<double(int s, int first, int last)>;

// Returns the S + 1 boundaries 0 = b_0 < b_1 < ... < b_S = L minimising max_s cost(s, b_s,
// b_{s+1}), or an empty vector when every split has an infinite cost. Requires 1 <= S <= L.
//
// Exact dynamic programme, O(S L^2) cost calls:
//   best[s][j] = min over i of max(best[s-1][i], cost(s-1, i, j))   (first s stages hold [0, j))
// Ties keep the smallest i (the earliest cut), at every stage, so a plan is reproducible.
std::vector<int> min_max_split(int L, int S, const StageCostFn& cost);

}  // namespace pt
