// Tensor parallelism on CUDA devices against single-device training on the CPU: a tiny GPT at
// T = 2 (heads, MLP and vocabulary split; with and without sequence parallelism), its two ranks
// on two CUDA backends in one process (two GPUs when there are, else two slots of cuda:0), its
// collectives through host buffers (the in-process group; started collectives run where they
// are started on GPUs), within tests/gpu/cpu_parity.h's tolerance (the split adds T partial
// sums, another order again, well inside it).
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/random.h"
#include "engine/devices/cuda_plugin.h"
#include "engine/replicas/data_parallel_trainer.h"
#include "engine/train/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/tensor_parallel/param_slices.h"
#include "layers/zoo.h"
#include "tests/gpu/cpu_parity.h"
#include "tests/pipeline/pipeline_test_util.h"

using namespace pt;
using pt::test::adamw_config;
using pt::test::Run;

namespace {

constexpr int64_t kVocab = 64, kContext = 16;

Model tiny_gpt() { return gpt(kVocab, kContext, 32, 2, 2); }

struct Tokens {
  std::vector<int32_t> ids, next;
  Tensor x, y;
};

// Three batches of 4 sequences (the second of 8 tokens: T = 2 divides it, as sequence
// parallelism needs); targets from a fixed rule, so there is something to learn.
std::vector<std::unique_ptr<Tokens>> batches() {
  std::vector<std::unique_ptr<Tokens>> out;
  for (uint64_t seed : {1u, 2u, 3u}) {
    auto b = std::make_unique<Tokens>();
    const int64_t B = 4, T = seed == 2 ? 8 : kContext;
    CounterRng rng(seed);
    for (int64_t i = 0; i < B * T; ++i) {
      b->ids.push_back(static_cast<int32_t>(rng.next_below(kVocab)));
      b->next.push_back((b->ids.back() * 5 + 1) % kVocab);
    }
    b->x = Tensor::borrow(b->ids.data(), Shape{B, T}, DType::i32);
    b->y = Tensor::borrow(b->next.data(), Shape{B, T}, DType::i32);
    out.push_back(std::move(b));
  }
  return out;
}

// Each parameter put together from the T copies' slices (read through their backends).
std::map<std::string, std::vector<float>> whole_params(DataParallelTrainer& trainer, int T) {
  std::map<std::string, std::vector<float>> whole;
  for (int t = 0; t < T; ++t) {
    PipelineTrainer& copy = trainer.replica(t);
    for (const StageState& s : copy.stage_states())
      for (size_t i = 0; i < s.params->entries().size(); ++i) {
        const ParameterEntry& e = s.params->entries()[i];
        const ParamSpec spec = copy.model().layer(e.layer).param_specs()[e.param_index];
        const Tensor p = s.params->param(i);
        std::vector<float> slice(static_cast<size_t>(p.numel()));
        s.params->backend().copy_to_host(slice.data(), p.data(), p.bytes());
        if (!spec.shard.split()) {
          if (t == 0) whole[e.name] = slice;
          continue;
        }
        auto& w = whole[e.name];
        w.resize(static_cast<size_t>(spec.shard.whole.numel()));
        put_slice(slice, spec.shard, w);
      }
  }
  return whole;
}

}  // namespace

TEST_CASE("cuda: tensor parallelism (T = 2) over two CUDA backends trains as one CPU device") {
  const auto data = batches();
  constexpr int M = 2;
  Run want;
  {
    auto cpu = make_cpu_backend(0, 1);
    Model m = tiny_gpt();
    Trainer t(m, *cpu, adamw_config(M));
    for (const auto& b : data) want.losses.push_back(t.train_step(b->x, b->y).loss);
    want.params = test::params_by_name(t.stage_states());
  }
  const int gpus = static_cast<int>(cuda_status().devices.size());
  for (const bool sp : {false, true}) {
    CAPTURE(sp);
    std::vector<std::unique_ptr<Backend>> owned;
    std::vector<Backend*> devices;
    for (int t = 0; t < 2; ++t) {
      owned.push_back(make_cuda_backend(gpus >= 2 ? t : 0, gpus >= 2 ? 0 : t, CudaPrecision::fp32));
      devices.push_back(owned.back().get());
    }
    Model shape_model = tiny_gpt();
    PipelineConfig pc = test::pipeline_config(shape_model, adamw_config(M), "1f1b", 1, M, 120);
    pc.parallel.sequence_parallel = sp;
    auto trainer = make_local_data_parallel(tiny_gpt, devices, pc, 1, 2);
    Run got;
    for (const auto& b : data) got.losses.push_back(trainer->train_step(b->x, b->y).loss);
    got.params = whole_params(*trainer, 2);
    test::expect_same_training(got, want);
    CHECK(want.losses.back() < want.losses.front());  // it trained
  }
}
