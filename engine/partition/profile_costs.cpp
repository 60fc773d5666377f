// profile_costs: the measured counterpart of estimate_costs (see layer_costs.h).
#include <algorithm>
#include <barrier>
#include <chrono>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/core/random.h"
#include "engine/forward_pass.h"
#include "engine/median.h"
#include "engine/partition/layer_costs.h"
#include "engine/partition/on_every_device.h"
#include "engine/stage_parameters.h"
#include "layers/embedding.h"

namespace pt {

namespace {

// A (shape) tensor on `backend` with f32 values uniform in [-1, 1), or i32 ids in [0, vocab).
Tensor random_tensor(Backend& backend, const Shape& shape, DType dtype, int64_t vocab,
                     uint64_t key) {
  Tensor t = backend.empty(shape, dtype);
  const auto n = static_cast<size_t>(t.numel());
  CounterRng rng(key);
  if (dtype == DType::i32) {
    std::vector<int32_t> host(n);
    for (auto& v : host) v = static_cast<int32_t>(rng.next_below(static_cast<uint64_t>(vocab)));
    if (n) backend.copy_from_host(t.data(), host.data(), t.bytes());
  } else {
    std::vector<float> host(n);
    for (auto& v : host) v = static_cast<float>(2.0 * rng.next_double() - 1.0);
    if (n) backend.copy_from_host(t.data(), host.data(), t.bytes());
  }
  return t;
}

// In a run a layer rarely finds all its weights and inputs in cache: the other stages and
// micro-batches ran in between, and on a CPU the other devices' cores share the last-level cache.
// Timed warm, over and over on one input, a layer of the MLP at micro-batch 32 took 0.75 of its
// time in a pipeline here; timed after a read of 64 MiB (every cache cold) the simulated
// pipeline came out 1.02-1.10 of the measured one up to M = 8 but 1.2-1.25 at M = 16, where
// consecutive micro-batches do find the weights. So every timed call starts after a read of
// 16 MiB, half of our CPUs' 32 MiB L3 (what a second device sharing it leaves): 0.95-1.08 of the
// measured pipeline at M = 2..8 (bench/pipeline). A read, not a write: written lines would be
// written back while the timed call runs, a cost no run pays.
constexpr int64_t kEvictBytes = int64_t{16} << 20;

// Seconds `f` takes, with the caches evicted by reading `evict` and the device drained before,
// and drained after (ops may be asynchronous).
template <class F>
double timed(Backend& backend, const Tensor& evict, F&& f) {
  using clock = std::chrono::steady_clock;
  static_cast<void>(backend.sum_squares(evict.f32(), evict.numel()));
  backend.synchronize();
  const auto t0 = clock::now();
  f();
  backend.synchronize();
  return std::chrono::duration<double>(clock::now() - t0).count();
}

// Profiling binds the layers to its own parameters (which unbind them again when they go away);
// this puts back the bindings they had before (a trainer's stages, say), on every way out.
class BindingGuard {
 public:
  explicit BindingGuard(const Model& model) : model_(model) {
    for (int l = 0; l < model.num_layers(); ++l) {
      const Layer& layer = model.layer(l);
      params_.emplace_back(layer.params().begin(), layer.params().end());
      grads_.emplace_back(layer.grads().begin(), layer.grads().end());
    }
  }
  ~BindingGuard() {
    for (int l = 0; l < model_.num_layers(); ++l) {
      const auto i = static_cast<size_t>(l);
      if (!params_[i].empty()) model_.layer(l).bind(params_[i], grads_[i]);
    }
  }
  BindingGuard(const BindingGuard&) = delete;
  BindingGuard& operator=(const BindingGuard&) = delete;

 private:
  const Model& model_;
  std::vector<std::vector<Tensor>> params_, grads_;
};

// A measured 0 only means "below the clock's resolution" (a reshape is a view); a floor keeps
// such layers from looking free to a partitioner that balances time.
constexpr double kMinSeconds = 1e-9;

}  // namespace

std::vector<LayerProfile> profile_costs(const Model& model, Backend& backend,
                                        int64_t microbatch_size, int repeats, uint64_t seed) {
  if (microbatch_size < 1)
    throw UsageError(fmt::format("micro-batch size must be >= 1 but is {}", microbatch_size));
  if (repeats < 1)
    throw UsageError(fmt::format("profiling needs repeats >= 1 but got {}", repeats));
  const int L = model.num_layers();
  backend.bind_current_thread();
  const BindingGuard restore(model);
  StageParameters params(model, 0, L, backend, seed);  // binds every layer to device memory
  const Tensor evict = backend.empty(Shape{kEvictBytes / static_cast<int64_t>(sizeof(float))});
  backend.fill(evict.f32(), 0.f, evict.numel());

  // Token ids must be valid rows of the first layer's table; 0..1 is safe for any vocabulary.
  int64_t vocab = 2;
  if (const auto* e = dynamic_cast<const Embedding*>(&model.layer(0))) vocab = e->vocab();
  Tensor x = random_tensor(backend, model.input_shape().with_batch(microbatch_size),
                           model.input_dtype(), vocab, hash_keys(seed, 0x1234));

  // The layers run in order through the one forward pass; after each layer's forward, its own
  // forward and backward are timed on the same input (the pass then goes on with a real
  // activation). Skip connections use the pass's board: a save layer's backward needs the
  // gradient its add_saved layer would have sent back, so a stand-in of the right shape is put
  // there when it is missing.
  const StepInfo info{seed, 0, 0, true};
  std::vector<LayerProfile> out;
  out.reserve(static_cast<size_t>(L));
  MicrobatchContexts pass(backend, info, 0, L, /*with_loss=*/false);
  const auto profile_layer = [&](int l, const Tensor& x, const Tensor& y, LayerContext& pass_ctx) {
    Layer& layer = model.layer(l);
    const Tensor dy = random_tensor(backend, layer.output_shape().with_batch(microbatch_size),
                                    DType::f32, 0, hash_keys(seed, static_cast<uint64_t>(l) + 1));
    const bool has_weights = layer.param_count() > 0;
    LayerProfile p;
    p.param_bytes = layer.param_count() * static_cast<int64_t>(sizeof(float));
    p.output_bytes = static_cast<int64_t>(y.bytes());
    std::vector<double> tf, ti, tw;
    // Run r = -1 is the warm-up (first-touch allocations, oneDNN primitive creation).
    for (int r = -1; r < repeats; ++r) {
      LayerContext ctx(backend, info, static_cast<uint64_t>(l));
      ctx.set_skips(&pass.skips());
      Tensor dx, timed_y;
      const double f = timed(backend, evict, [&] { timed_y = layer.forward(x, ctx); });
      p.activation_bytes = static_cast<int64_t>(ctx.saved_bytes());
      for (const SkipEdge& e : model.skip_edges())
        if (e.producer == l && !pass.skips().gradients.contains(e.name))
          pass.skips().gradients[e.name] = dy;
      const double i = timed(backend, evict, [&] { dx = layer.backward_input(dy, ctx); });
      const double w =
          has_weights ? timed(backend, evict, [&] { layer.backward_weight(dy, ctx); }) : 0.0;
      if (r < 0) continue;
      tf.push_back(f);
      ti.push_back(i);
      tw.push_back(w);
    }
    pass_ctx.clear();  // the pass keeps only what the next layers need: the output and the skips
    p.forward_s = std::max(median_of(tf), kMinSeconds);
    // Timed for every layer, charged only where a step computes it: after the first layer with
    // parameters (layers/model.h; a later stage whose first layer comes before it, which no
    // balanced split makes, still computes it and is predicted a little fast).
    p.backward_input_s = model.needs_input_gradient(l) ? std::max(median_of(ti), kMinSeconds) : 0.0;
    p.backward_weight_s = has_weights ? std::max(median_of(tw), kMinSeconds) : 0.0;
    out.push_back(p);
  };
  forward_layers(model, 0, L, x, pass, profile_layer);
  return out;
}

std::vector<LayerProfile> profile_costs_together(const std::function<Model()>& make_model,
                                                 const std::vector<Backend*>& devices,
                                                 int64_t microbatch_size, int repeats,
                                                 uint64_t seed) {
  if (devices.empty()) throw UsageError("profiling needs at least one device");
  std::vector<Model> models;
  for (size_t d = 0; d < devices.size(); ++d) models.push_back(make_model());
  if (devices.size() == 1)
    return profile_costs(models[0], *devices[0], microbatch_size, repeats, seed);
  std::vector<std::vector<LayerProfile>> each(devices.size());
  on_every_device(devices, [&](size_t d, std::barrier<>&) {
    each[d] = profile_costs(models[d], *devices[d], microbatch_size, repeats, seed);
  });
  std::vector<LayerProfile> out = each[0];
  const auto n = static_cast<double>(devices.size());
  for (size_t l = 0; l < out.size(); ++l) {
    out[l].forward_s = out[l].backward_input_s = out[l].backward_weight_s = 0;
    for (const auto& device : each) {
      out[l].forward_s += device[l].forward_s / n;
      out[l].backward_input_s += device[l].backward_input_s / n;
      out[l].backward_weight_s += device[l].backward_weight_s / n;
    }
  }
  return out;
}

}  // namespace pt
