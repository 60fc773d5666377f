#pragma once
// What bench/tensor_parallel's timed setups (tensor_parallel.cpp) and its counted runs
// (tensor_parallel_bytes.cpp) share: the flags, the GPT, the pipeline configuration and the batch.
#include <cstdint>
#include <vector>

#include "engine/core/random.h"
#include "engine/pipeline/pipeline_config.h"
#include "layers/zoo.h"
#include "schedule/generators.h"
#include "schedule/lowering.h"

namespace pt::bench {

struct Flags {
  int64_t vocab = 256, context = 128, d_model = 256, batch = 16;
  int layers = 4, heads = 4, microbatches = 1;
  int steps = 10, warmup = 2, count_steps = 3;
};

inline pt::Model make_model(const Flags& f) {
  return pt::gpt(f.vocab, f.context, f.d_model, f.layers, f.heads);
}

inline pt::PipelineConfig pipeline_config(const Flags& f, bool sequence_parallel = false,
                                          bool overlap = true) {
  pt::PipelineConfig pc;
  pc.parallel.sequence_parallel = sequence_parallel;  // read with T > 1 only
  pc.parallel.tensor_parallel_overlap = overlap;
  pc.trainer.microbatches = f.microbatches;
  pc.trainer.optimizer.kind = "adamw";
  pc.trainer.optimizer.lr = 3e-4f;
  pc.trainer.lr = {pt::LrSchedule::Kind::constant, 3e-4f, 0, 0, 0.f};
  pc.schedule = pt::sched::add_communication(pt::sched::generate("1f1b", 1, f.microbatches));
  pc.layers_per_stage = {make_model(f).num_layers()};
  return pc;
}

// Random token ids and targets, (B, s) each, host memory.
struct Batch {
  std::vector<int32_t> xs, ys;
  pt::Tensor x, y;
};

inline Batch make_batch(const Flags& f) {
  Batch b;
  pt::CounterRng rng(1);
  for (int64_t i = 0; i < f.batch * f.context; ++i) {
    b.xs.push_back(static_cast<int32_t>(rng.next_below(static_cast<uint64_t>(f.vocab))));
    b.ys.push_back(static_cast<int32_t>(rng.next_below(static_cast<uint64_t>(f.vocab))));
  }
  b.x = pt::Tensor::borrow(b.xs.data(), {f.batch, f.context}, pt::DType::i32);
  b.y = pt::Tensor::borrow(b.ys.data(), {f.batch, f.context}, pt::DType::i32);
  return b;
}

}  // namespace pt::bench
