#pragma once
// Shared by the partition tests: small models, random cost tables and a brute-force search
// over every split (the reference the dynamic programmes are checked against).
#include <functional>
#include <vector>

#include "engine/core/random.h"
#include "engine/partition/layer_costs.h"
#include "layers/builder.h"

namespace pt::test {

// L ReLU layers on a (4) input: a model of any length whose costs the tests make up.
inline Model chain(int L) {
  ModelBuilder b({4});
  for (int l = 0; l < L; ++l) b.relu();
  return b.cross_entropy().build();
}

// Random costs; small integer-valued times and sizes make ties (and so tie-breaking) common.
inline std::vector<LayerProfile> random_costs(int L, CounterRng& rng) {
  std::vector<LayerProfile> c(static_cast<size_t>(L));
  for (LayerProfile& p : c) {
    p.forward_s = static_cast<double>(rng.next_below(5)) * 1e-3;
    p.backward_input_s = static_cast<double>(rng.next_below(5)) * 1e-3;
    p.backward_weight_s = static_cast<double>(rng.next_below(3)) * 1e-3;
    p.param_bytes = static_cast<int64_t>(rng.next_below(6)) * 1024;
    p.activation_bytes = static_cast<int64_t>(rng.next_below(6)) * 512;
    p.output_bytes = 256;
  }
  return c;
}

// Calls visit(bounds) for every split of L layers into S non-empty contiguous stages.
inline void for_each_split(int L, int S,
                           const std::function<void(const std::vector<int>&)>& visit) {
  std::vector<int> b{0};
  std::function<void()> rec = [&] {
    const int s = static_cast<int>(b.size()) - 1;  // stages placed so far
    if (s == S - 1) {
      b.push_back(L);
      visit(b);
      b.pop_back();
      return;
    }
    for (int next = b.back() + 1; next <= L - (S - s - 1); ++next) {
      b.push_back(next);
      rec();
      b.pop_back();
    }
  };
  rec();
}

}  // namespace pt::test
