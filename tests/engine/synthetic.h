#pragma once
// Small deterministic classification data for engine tests: inputs in [-1, 1), labels that
// depend on the inputs (so a model can learn them).
#include "engine/core/random.h"
#include "engine/data/dataset.h"

namespace pt::test {

inline Dataset synthetic_dataset(int64_t n, Shape sample_shape, int32_t classes, uint64_t seed) {
  Dataset d;
  d.sample_shape = sample_shape;
  d.num_classes = classes;
  CounterRng rng(seed);
  const int64_t k = sample_shape.numel();
  d.inputs.resize(static_cast<size_t>(n * k));
  d.labels.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t j = 0; j < k; ++j) {
      const float v = static_cast<float>(2.0 * rng.next_double() - 1.0);
      d.inputs[static_cast<size_t>(i * k + j)] = v;
      s += v * static_cast<double>(j % 3 + 1);
    }
    d.labels[static_cast<size_t>(i)] =
        static_cast<int32_t>(static_cast<int64_t>(std::abs(s) * 3) % classes);
  }
  return d;
}

}  // namespace pt::test
