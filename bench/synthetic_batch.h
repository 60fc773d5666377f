#pragma once
// What the MLP benchmarks share: a synthetic Fashion-MNIST-shaped batch (the speed does not
// depend on the values) and the SGD configuration they time.
#include <cstdint>
#include <vector>

#include "engine/core/random.h"
#include "engine/train/trainer.h"

namespace pt::bench {

struct Batch {
  std::vector<float> x;
  std::vector<int32_t> y;
  Tensor hx, hy;

  explicit Batch(int64_t B) : x(static_cast<size_t>(B * 784)), y(static_cast<size_t>(B)) {
    CounterRng rng(1);
    for (auto& v : x) v = static_cast<float>(rng.next_double());
    for (auto& v : y) v = static_cast<int32_t>(rng.next_below(10));
    hx = Tensor::borrow(x.data(), {B, 1, 28, 28});
    hy = Tensor::borrow(y.data(), {B}, DType::i32);
  }
  Batch(const Batch&) = delete;  // hx, hy point into x, y
  Batch& operator=(const Batch&) = delete;
};

// SGD (momentum 0.9: one optimizer slot), lr 0.01, M micro-batches.
inline TrainerConfig sgd_config(int M) {
  TrainerConfig cfg;
  cfg.microbatches = M;
  cfg.optimizer.kind = "sgd";
  cfg.optimizer.lr = 0.01f;
  cfg.lr = {LrSchedule::Kind::constant, 0.01f, 0, 0, 0.f};
  return cfg;
}

}  // namespace pt::bench
