#include <algorithm>
#include <stdexcept>
#include <utility>
#include <vector>

#include "schedule/generator_args.h"
#include "schedule/generators.h"

namespace pt::sched {

namespace {

// The order in which a device visits (micro-batch, chunk) pairs, as Megatron's
// get_model_chunk_id(): micro-batches in groups of D, each group through chunk 0, then chunk 1,
// ... For D = 2, M = 4, V = 2:
//
//   k        0  1  2  3  4  5  6  7
//   m        0  1  0  1  2  3  2  3
//   chunk    0  0  1  1  0  0  1  1
//
// Forwards follow the table with chunk c; backwards follow it with chunk V - 1 - c (the last
// chunk's backward comes first). Requires M % D == 0.
std::vector<std::pair<int, int>> visit_table(int D, int M, int V) {
  std::vector<std::pair<int, int>> table;  // (m, chunk)
  for (int first = 0; first < M; first += D)
    for (int c = 0; c < V; ++c)
      for (int m = first; m < first + D; ++m) table.push_back({m, c});
  return table;
}

}  // namespace

// Megatron's interleaved 1F1B (Narayanan et al. 2021, section 2.2; Megatron-LM's
// forward_backward_pipelining_with_interleaving). Device d holds chunks c = 0..V-1, i.e. stages
// k = c * D + d, and walks the M * V (micro-batch, chunk) pairs of visit_table():
//   warm-up:   min(2 (D - d - 1) + (V - 1) D, M V) forwards,
//   steady:    one forward, one backward,
//   cool-down: the remaining backwards.
// Each stage then has 1/V of the work, so the fill and drain take 1/V as long: bubble
// (D - 1) / (V M + D - 1) instead of (D - 1) / (M + D - 1), for V times the point-to-point
// traffic and more activations held on device 0. For D = 2, M = 4, V = 2 (stages 0 and 2 on
// device 0, 1 and 3 on device 1):
//
//   dev 0   0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3
//   dev 1   1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3
//
// M must be a multiple of D, as in Megatron. We tried the obvious generalisation (a short last
// group, as Megatron-core's get_schedule_table builds): the dry run finds it deadlocks for some
// shapes (D = 5, M = 7, V = 2) and the simulator finds others slower than plain 1F1B, so we refuse
// those M instead. Megatron also switches to all-forwards-first when M == D; we keep the formula
// (deadlock-free per the dry run, and it holds fewer activations). Every stage's backwards come in
// ascending micro-batch order: the table visits the micro-batches of a chunk in ascending order.
Schedule interleaved(int D, int M, int V) {
  detail::require_shape("interleaved", D, M);
  if (V < 1)
    throw std::invalid_argument(
        "interleaved schedule needs at least 1 chunk per device (V: " + std::to_string(V) + ")");
  if (V == 1) return one_f_one_b(D, M);
  if (M % D != 0) {
    const int below = M / D * D, above = below + D;
    throw std::invalid_argument(
        "interleaved schedule needs the micro-batch count to be a multiple of the device count, "
        "M % D == 0 (micro-batches: " +
        std::to_string(M) + ", devices: " + std::to_string(D) + "): use " +
        (below > 0 ? std::to_string(below) + " or " : std::string()) + std::to_string(above) +
        " micro-batches, or the 1f1b or zb-h1 schedule");
  }

  const int total = M * V;
  const auto table = visit_table(D, M, V);
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
    const int warmup = std::min(2 * (D - d - 1) + (V - 1) * D, total);
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
