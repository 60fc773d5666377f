// Training on CUDA against training on the CPU: the same model, data and seeds, single device and
// pipelined over two backends sharing one GPU (or two GPUs when there are), every schedule,
// within tests/gpu/cpu_parity.h's tolerance.
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/random.h"
#include "engine/devices/cuda_plugin.h"
#include "engine/pipeline/pipeline_trainer.h"
#include "engine/train/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/zoo.h"
#include "tests/gpu/cpu_parity.h"
#include "tests/pipeline/pipeline_test_util.h"

using namespace pt;
using pt::test::adamw_config;
using pt::test::expect_same_training;
using pt::test::Run;

namespace {

// Parameters by checkpoint name, read through each stage's backend (device memory on CUDA).
std::map<std::string, std::vector<float>> read_params(const std::vector<StageState>& stages) {
  std::map<std::string, std::vector<float>> out;
  for (const StageState& s : stages)
    for (size_t i = 0; i < s.params->entries().size(); ++i) {
      const Tensor t = s.params->param(i);
      std::vector<float> host(static_cast<size_t>(t.numel()));
      s.params->backend().copy_to_host(host.data(), t.data(), t.bytes());
      out[s.params->entries()[i].name] = std::move(host);
    }
  return out;
}

// hx and hy borrow x and y (or ids): a copy would still point at the original's buffers, so a
// batch can only be moved (a vector's move keeps its buffer).
struct TrainBatch {
  TrainBatch() = default;
  TrainBatch(TrainBatch&&) noexcept = default;
  TrainBatch& operator=(TrainBatch&&) noexcept = default;
  TrainBatch(const TrainBatch&) = delete;
  TrainBatch& operator=(const TrainBatch&) = delete;
  ~TrainBatch() = default;

  std::vector<float> x;      // images
  std::vector<int32_t> ids;  // or token ids
  std::vector<int32_t> y;
  Tensor hx, hy;
};

// Fashion-MNIST-shaped random images with labels from a fixed rule (learnable).
TrainBatch images(int64_t B, uint64_t seed) {
  TrainBatch b;
  b.x.resize(static_cast<size_t>(B * 784));
  b.y.resize(static_cast<size_t>(B));
  CounterRng rng(seed);
  for (float& v : b.x) v = static_cast<float>(rng.next_double());
  for (int64_t i = 0; i < B; ++i)
    b.y[static_cast<size_t>(i)] = static_cast<int32_t>(rng.next_below(10));
  b.hx = Tensor::borrow(b.x.data(), Shape{B, 1, 28, 28});
  b.hy = Tensor::borrow(b.y.data(), Shape{B}, DType::i32);
  return b;
}

// Three batches, the last one smaller (an epoch's remainder). Built by moves: an initializer
// list would copy each batch and leave its tensors pointing at the destroyed temporaries.
std::vector<TrainBatch> three_batches() {
  std::vector<TrainBatch> data;
  data.push_back(images(64, 1));
  data.push_back(images(64, 2));
  data.push_back(images(37, 3));
  return data;
}

// Backends for D stages: one GPU per stage when there are enough, else slots of cuda:0.
struct CudaStages {
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> devices;
  explicit CudaStages(int D) {
    const int gpus = static_cast<int>(cuda_status().devices.size());
    for (int d = 0; d < D; ++d) {
      owned.push_back(make_cuda_backend(gpus >= D ? d : 0, gpus >= D ? 0 : d, CudaPrecision::fp32));
      devices.push_back(owned.back().get());
    }
  }
};

Run train_single(Backend& backend, Model (*make)(), const std::vector<TrainBatch>& data, int M) {
  Model m = make();
  Trainer t(m, backend, adamw_config(M));
  Run r;
  for (const TrainBatch& b : data) r.losses.push_back(t.train_step(b.hx, b.hy).loss);
  r.params = read_params(t.stage_states());
  return r;
}

Run train_pipeline(const std::vector<Backend*>& devices, Model (*make)(),
                   const std::vector<TrainBatch>& data, const std::string& schedule, int M) {
  Model m = make();
  const int D = static_cast<int>(devices.size());
  PipelineTrainer t(m, devices, test::pipeline_config(m, adamw_config(M), schedule, D, M, 120));
  Run r;
  for (const TrainBatch& b : data) r.losses.push_back(t.train_step(b.hx, b.hy).loss);
  r.params = read_params(t.stage_states());
  return r;
}

}  // namespace

TEST_CASE("cuda: the Fashion-MNIST MLP and CNN train as on the CPU (single device)") {
  const std::vector<TrainBatch> data = three_batches();
  auto cpu = make_cpu_backend(0, 1);
  auto gpu = make_cuda_backend(0, 0, CudaPrecision::fp32);
  for (auto make : {&fashion_mlp, &fashion_cnn}) {
    const Run want = train_single(*cpu, make, data, 2);
    const Run got = train_single(*gpu, make, data, 2);
    expect_same_training(got, want);
  }
}

TEST_CASE("cuda: pipelines over two CUDA backends train as one CPU device, every schedule") {
  const std::vector<TrainBatch> data = three_batches();
  auto cpu = make_cpu_backend(0, 1);
  for (int M : {1, 4}) {
    const Run want = train_single(*cpu, &fashion_mlp, data, M);
    for (const std::string schedule : {"gpipe", "1f1b", "zb-h1", "zb-h2", "interleaved:2", "zbv",
                                       "v-half", "v-min", "dualpipev"}) {
      if (schedule == "dualpipev" && M < 4) continue;  // needs M >= 2D
      CAPTURE(schedule);
      CAPTURE(M);
      CudaStages stages(2);
      expect_same_training(train_pipeline(stages.devices, &fashion_mlp, data, schedule, M), want);
    }
  }
}

TEST_CASE(
    "cuda: a tiny GPT (attention, layer norm, tied embeddings) pipelined trains as on the CPU") {
  constexpr int64_t kVocab = 64, kContext = 16;
  std::vector<TrainBatch> data;
  for (uint64_t seed : {1u, 2u, 3u}) {
    TrainBatch b;
    const int64_t B = 6, T = seed == 2 ? 9 : kContext;  // a shorter batch too
    std::vector<int32_t> ids(static_cast<size_t>(B * T)), next(static_cast<size_t>(B * T));
    CounterRng rng(seed);
    for (size_t i = 0; i < ids.size(); ++i) {
      ids[i] = static_cast<int32_t>(rng.next_below(kVocab));
      next[i] = (ids[i] * 5 + 1) % kVocab;
    }
    b.y = std::move(next);
    b.ids = std::move(ids);
    b.hx = Tensor::borrow(b.ids.data(), Shape{B, T}, DType::i32);
    b.hy = Tensor::borrow(b.y.data(), Shape{B, T}, DType::i32);
    data.push_back(std::move(b));
  }
  auto make = +[] { return gpt(kVocab, kContext, 32, 2, 2); };
  auto cpu = make_cpu_backend(0, 1);
  const Run want = train_single(*cpu, make, data, 2);
  CudaStages stages(2);
  expect_same_training(train_pipeline(stages.devices, make, data, "1f1b", 2), want);
}
