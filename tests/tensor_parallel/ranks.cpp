#include "tests/tensor_parallel/ranks.h"

#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "engine/comm/in_process.h"
#include "engine/core/random.h"
#include "engine/parallel/tensor_parallel_group.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/tensor_parallel/param_slices.h"

namespace pt::test {

TpRanks::TpRanks(int size, double timeout_s) {
  for (int r = 0; r < size; ++r) backends_.push_back(make_cpu_backend(r, 1));
  comms_ = make_in_process_group(size, timeout_s, "tensor-parallel test");
  groups_ = tensor_parallel_groups(comms_);
}

TpRanks::~TpRanks() = default;

TensorParallel TpRanks::tp(int rank, bool sequence_parallel) const {
  TensorParallel t;
  t.group = groups_[static_cast<size_t>(rank)].get();
  t.rank = rank;
  t.size = size();
  t.sequence_parallel = sequence_parallel;
  return t;
}

void TpRanks::run(const std::function<void(int rank)>& job) const {
  std::exception_ptr first;
  std::mutex m;
  std::vector<std::thread> threads;
  for (int r = 0; r < size(); ++r)
    threads.emplace_back([&, r] {
      try {
        job(r);
      } catch (...) {
        std::lock_guard lock(m);
        if (!first) first = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

BoundSlices bind_slices(Layer& layer, Backend& be, const std::vector<std::vector<float>>& whole) {
  BoundSlices b;
  const auto specs = layer.param_specs();
  for (size_t i = 0; i < specs.size(); ++i) {
    std::vector<float> host(static_cast<size_t>(specs[i].shape.numel()));
    if (specs[i].shard.split())
      take_slice(whole.at(i), specs[i].shard, host);
    else
      host = whole.at(i);
    Tensor p = be.empty(specs[i].shape);
    be.copy_from_host(p.data(), host.data(), p.bytes());
    Tensor g = be.empty(specs[i].shape);
    be.fill(g.f32(), 0.f, g.numel());
    b.params.push_back(p);
    b.grads.push_back(g);
  }
  layer.bind(b.params, b.grads);
  return b;
}

std::vector<float> gather_whole(const std::vector<const Layer*>& rank_layers, size_t i,
                                const std::vector<Backend*>& backends) {
  const ParamSpec spec = rank_layers[0]->param_specs().at(i);
  const Shape whole_shape = spec.shard.split() ? spec.shard.whole : spec.shape;
  std::vector<float> whole(static_cast<size_t>(whole_shape.numel()));
  for (size_t r = 0; r < rank_layers.size(); ++r) {
    const ParamSpec s = rank_layers[r]->param_specs().at(i);
    const Tensor& g = rank_layers[r]->grads()[i];
    std::vector<float> host(static_cast<size_t>(g.numel()));
    backends[r]->copy_to_host(host.data(), g.data(), g.bytes());
    if (!s.shard.split()) {
      if (r == 0) whole = host;
      continue;
    }
    put_slice(host, s.shard, whole);
  }
  return whole;
}

std::vector<float> uniform_values(uint64_t seed, int64_t n, float lo, float hi) {
  CounterRng rng(hash_keys(seed, 0x7e57));
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = lo + static_cast<float>(rng.next_double()) * (hi - lo);
  return v;
}

std::vector<std::vector<float>> whole_params(const Layer& layer, uint64_t seed, float scale) {
  std::vector<std::vector<float>> out;
  uint64_t k = 0;
  for (const ParamSpec& s : layer.param_specs()) {
    const Shape whole = s.shard.split() ? s.shard.whole : s.shape;
    out.push_back(uniform_values(hash_keys(seed, ++k), whole.numel(), -scale, scale));
  }
  return out;
}

LayerRun run_layer(Layer& layer, Backend& be, const std::vector<std::vector<float>>& params,
                   const Tensor& x, const std::vector<float>& dy, bool together) {
  LayerRun r;
  r.bound = bind_slices(layer, be, params);
  const StepInfo info{/*seed=*/7, /*step=*/0, /*microbatch=*/0, /*training=*/true};
  LayerContext ctx(be, info, /*key=*/1);
  const Tensor y = layer.forward(x, ctx);
  r.saved_bytes = ctx.saved_bytes();
  r.y.resize(static_cast<size_t>(y.numel()));
  be.copy_to_host(r.y.data(), y.data(), y.bytes());
  Tensor dyt = be.empty(y.shape());
  if (static_cast<int64_t>(dy.size()) != y.numel())
    throw std::logic_error("run_layer: dy has another size than y");
  be.copy_from_host(dyt.data(), dy.data(), dyt.bytes());
  const Tensor dx = together ? layer.backward(dyt, ctx) : layer.backward_input(dyt, ctx);
  if (dx.numel()) {
    r.dx.resize(static_cast<size_t>(dx.numel()));
    be.copy_to_host(r.dx.data(), dx.data(), dx.bytes());
  }
  if (!together) layer.backward_weight(dyt, ctx);
  layer.complete_gradients(be);  // the step's only micro-batch
  be.synchronize();
  return r;
}

}  // namespace pt::test
