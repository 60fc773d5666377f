#include <algorithm>
#include <stdexcept>
#include <utility>
#include <vector>

#include "schedule/generator_args.h"
#include "schedule/generators.h"

namespace pt::sched {

namespace {

// The micro-batch groups: each group visits chunk 0, then chunk 1, ... before the next group
// starts. Megatron-LM's microbatch_group_size_per_vp_stage, D by default: a group of D keeps
// device 0 busy exactly until the group's first micro-batch comes back around from device D - 1
// for the next chunk. For M >= D with a remainder r = M % D, Megatron ends with a short group of
// r, whose chunk changes wait D - r for the wrap-around, and which deadlocks here with the
// warm-up below unless that grows too (D = 5, M = 7, V = 2, a whole stage's F = B = 1: a step
// of 20.5 once it runs, against the formula's 18 and 1F1B's 22). We spread the remainder instead:
// n = M / D groups of D + r / n, the first r % n of them one larger. A group larger than D never
// waits at a chunk change (its first micro-batch is back before the group is through), so the
// bubble stays the formula's; the price is (V - 1) ceil(r / n) more forwards in the warm-up.
// M < D is one group of M (it waits D - M at each chunk change: nothing else is in flight).
std::vector<int> group_sizes(int D, int M) {
  if (M <= D) return {M};
  const int n = M / D, r = M % D;
  std::vector<int> sizes(static_cast<size_t>(n), D + r / n);
  for (int g = 0; g < r % n; ++g) ++sizes[static_cast<size_t>(g)];
  return sizes;
}

// The order in which a device visits (micro-batch, chunk) pairs, as Megatron's
// get_model_chunk_id(): micro-batches in groups (group_sizes), each group through chunk 0, then
// chunk 1, ... For D = 2, M = 4, V = 2:
//
//   k        0  1  2  3  4  5  6  7
//   m        0  1  0  1  2  3  2  3
//   chunk    0  0  1  1  0  0  1  1
//
// and for D = 2, M = 5 (groups of 3 and 2) the first group is 0 1 2 through chunk 0 then chunk 1.
// Forwards follow the table with chunk c; backwards follow it with chunk V - 1 - c (the last
// chunk's backward comes first).
std::vector<std::pair<int, int>> visit_table(const std::vector<int>& groups, int V) {
  std::vector<std::pair<int, int>> table;  // (m, chunk)
  int first = 0;
  for (const int size : groups) {
    for (int c = 0; c < V; ++c)
      for (int m = first; m < first + size; ++m) table.push_back({m, c});
    first += size;
  }
  return table;
}

}  // namespace

// Megatron's interleaved 1F1B (Narayanan et al. 2021, section 2.2; Megatron-LM's
// forward_backward_pipelining_with_interleaving). Device d holds chunks c = 0..V-1, i.e. stages
// k = c * D + d, and walks the M * V (micro-batch, chunk) pairs of visit_table():
//   warm-up:   min(2 (D - d - 1) + (V - 1) G, M V) forwards, G the largest group (D when
//              M % D == 0: Megatron's count),
//   steady:    one forward, one backward,
//   cool-down: the remaining backwards.
// Each stage then has 1/V of the work, so the fill and drain take 1/V as long: bubble
// (D - 1) / (V M + D - 1) instead of (D - 1) / (M + D - 1) for any M >= D, for V times the
// point-to-point traffic and more activations held on device 0. With M < D the single group
// waits at each chunk change: step (F + B)(D + (M - 1) / V), bubble
// (V (D - M) + M - 1) / (V D + M - 1), still below 1F1B's for M >= 2. For D = 2, M = 4, V = 2
// (stages 0 and 2 on device 0, 1 and 3 on device 1):
//
//   dev 0   0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3
//   dev 1   1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3
//
// Megatron switches to all-forwards-first when M == D; we keep the formula (deadlock-free per the
// dry run, and it holds fewer activations). Every stage's backwards come in ascending micro-batch
// order: the table visits the micro-batches of a chunk in ascending order.
Schedule interleaved(int D, int M, int V) {
  detail::require_shape("interleaved", D, M);
  if (V < 1)
    throw std::invalid_argument(
        "interleaved schedule needs at least 1 chunk per device (V: " + std::to_string(V) + ")");
  if (V == 1) return one_f_one_b(D, M);
  const int total = M * V;
  const std::vector<int> groups = group_sizes(D, M);
  const int largest = *std::max_element(groups.begin(), groups.end());
  const auto table = visit_table(groups, V);
  Schedule s = empty_schedule(D, D * V, M);
  for (int d = 0; d < D; ++d) {
    auto& list = s.actions[static_cast<size_t>(d)];
    auto forward = [&](int k) {
      const auto [m, c] = table[static_cast<size_t>(k)];
      list.push_back({c * D + d, ActionType::F, m});
    };
    auto backward = [&](int k) {
      const auto [m, c] = table[static_cast<size_t>(k)];
      list.push_back({(V - 1 - c) * D + d, ActionType::B, m});
    };
    const int warmup = std::min(2 * (D - d - 1) + (V - 1) * largest, total);
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int k = 0; k < total - warmup; ++k) {
      forward(warmup + k);
      backward(k);
    }
    for (int k = total - warmup; k < total; ++k) backward(k);
  }
  return s;
}

}  // namespace pt::sched
