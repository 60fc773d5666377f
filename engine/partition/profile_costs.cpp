// profile_costs: the measured counterpart of estimate_costs (see layer_costs.h).
#include <algorithm>
#include <barrier>
#include <chrono>
#include <limits>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/core/random.h"
#include "engine/partition/layer_costs.h"
#include "engine/partition/min_max_split.h"
#include "engine/partition/on_every_device.h"
#include "engine/report/median.h"
#include "engine/train/forward_pass.h"
#include "engine/train/stage_parameters.h"
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

void check_profile_arguments(int64_t microbatch_size, int repeats) {
  if (microbatch_size < 1)
    throw UsageError(fmt::format("micro-batch size must be >= 1 but is {}", microbatch_size));
  if (repeats < 1)
    throw UsageError(fmt::format("profiling needs repeats >= 1 but got {}", repeats));
}

// A measured 0 only means "below the clock's resolution" (a reshape is a view); a floor keeps
// such layers from looking free to a partitioner that balances time.
constexpr double kMinSeconds = 1e-9;

// Profiles of layers [first, last), at their own indices; the other entries stay empty.
std::vector<LayerProfile> profile_range(const Model& model, Backend& backend, int first, int last,
                                        int64_t microbatch_size, int repeats, uint64_t seed) {
  const int L = model.num_layers();
  backend.bind_current_thread();
  const BindingGuard restore(model);
  StageParameters params(model, 0, L, backend, seed);  // binds every layer to device memory

  // Token ids must be valid rows of the first layer's table; 0..1 is safe for any vocabulary.
  int64_t vocab = 2;
  if (const auto* e = dynamic_cast<const Embedding*>(&model.layer(0))) vocab = e->vocab();
  Tensor x = random_tensor(backend, model.input_shape().with_batch(microbatch_size),
                           model.input_dtype(), vocab, hash_keys(seed, 0x1234));
  const StepInfo info{seed, 0, 0, true};
  if (first > 0) {  // the range's real input: the layers before it, run once, untimed
    MicrobatchContexts before(backend, info, 0, first, /*with_loss=*/false);
    x = forward_layers(model, 0, first, x, before);
  }
  const Tensor dy_last =
      random_tensor(backend, model.layer(last - 1).output_shape().with_batch(microbatch_size),
                    DType::f32, 0, hash_keys(seed, 0x5678));

  const auto L_ = static_cast<size_t>(L);
  std::vector<LayerProfile> out(L_);
  std::vector<std::vector<double>> tf(L_), ti(L_), tw(L_);
  using clock = std::chrono::steady_clock;
  const auto seconds_since = [&](clock::time_point t0) {
    backend.synchronize();
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  // Run r = -1 is the warm-up (first-touch allocations, oneDNN primitive creation).
  for (int r = -1; r < repeats; ++r) {
    MicrobatchContexts pass(backend, info, first, last, /*with_loss=*/false);
    backend.synchronize();
    auto t0 = clock::now();
    forward_layers(
        model, first, last, x, pass, [&](int l, const Tensor&, const Tensor& y, LayerContext& ctx) {
          const double f = seconds_since(t0);
          LayerProfile& p = out[static_cast<size_t>(l)];
          if (r < 0) {
            p.param_bytes = model.layer(l).param_count() * static_cast<int64_t>(sizeof(float));
            p.output_bytes = static_cast<int64_t>(y.bytes());
            p.activation_bytes = static_cast<int64_t>(ctx.saved_bytes());
          } else {
            tf[static_cast<size_t>(l)].push_back(f);
          }
          t0 = clock::now();
        });
    Tensor dy = dy_last;
    for (int l = last - 1; l >= first; --l) {
      const auto i = static_cast<size_t>(l);
      Layer& layer = model.layer(l);
      LayerContext& c = pass.layer(l);
      Tensor dx;
      if (model.needs_input_gradient(l)) {
        backend.synchronize();
        const auto t = clock::now();
        dx = layer.backward_input(dy, c);
        if (r >= 0) ti[i].push_back(seconds_since(t));
      }
      if (layer.param_count() > 0) {
        backend.synchronize();
        const auto t = clock::now();
        layer.backward_weight(dy, c);
        if (r >= 0) tw[i].push_back(seconds_since(t));
      }
      c.clear();
      // No input gradient: no layer before this one has parameters (layers/model.h), so none
      // of them computes either gradient.
      if (!dx.defined()) break;
      dy = std::move(dx);
    }
  }
  for (auto l = static_cast<size_t>(first); l < static_cast<size_t>(last); ++l) {
    out[l].forward_s = std::max(median_of(tf[l]), kMinSeconds);
    out[l].backward_input_s = ti[l].empty() ? 0.0 : std::max(median_of(ti[l]), kMinSeconds);
    out[l].backward_weight_s = tw[l].empty() ? 0.0 : std::max(median_of(tw[l]), kMinSeconds);
  }
  return out;
}

// Why chunks (profile_costs_together): a CPU device's cores share the last-level cache, so a
// layer's time depends on what else runs. A pipeline stage runs its own layers forward and
// backward, micro-batch after micro-batch, while the other devices do the same with theirs: the
// cache holds about one stage's weights per core. Measured with bench/pipeline (MLP, 2 stages,
// batch 256, 4 runs each, simulated / measured step, median per schedule): layers timed one at a
// time, warm, came out 0.7-0.8 of their time in a pipeline at micro-batch 16-32; timed after a
// 16 MiB read before every call, 1.15-1.19 at M = 16 (micro-batch 16) and 0.99-1.06 at M <= 8;
// every device running the whole model this way, 1.11-1.24 at M = 16 (both cores stream all
// the weights, twice what the pipeline's caches hold); one chunk per device, 0.92-0.99 at every
// M from 2 to 16 for gpipe, 1f1b, zb-h1 and interleaved:2.
// The chunks' S + 1 boundaries, none inside a skip connection (a chunk runs alone); empty when
// no such split exists.
std::vector<int> profile_chunks(const Model& model, int chunks, int64_t microbatch_size) {
  const auto estimate = estimate_costs(model, microbatch_size);
  const auto crosses = [&](int cut) {
    for (const SkipEdge& e : model.skip_edges())
      if (e.producer < cut && cut <= e.consumer) return true;
    return false;
  };
  return min_max_split(model.num_layers(), chunks, [&](int, int first, int last) {
    if (crosses(first) || crosses(last)) return std::numeric_limits<double>::infinity();
    double t = 0;
    for (int l = first; l < last; ++l) t += estimate[static_cast<size_t>(l)].total_s();
    return t;
  });
}

}  // namespace

std::vector<LayerProfile> profile_costs(const Model& model, Backend& backend,
                                        int64_t microbatch_size, int repeats, uint64_t seed) {
  check_profile_arguments(microbatch_size, repeats);
  return profile_range(model, backend, 0, model.num_layers(), microbatch_size, repeats, seed);
}

std::vector<LayerProfile> profile_costs_together(const std::function<Model()>& make_model,
                                                 const std::vector<Backend*>& devices,
                                                 int64_t microbatch_size, int repeats,
                                                 uint64_t seed, int chunks) {
  if (devices.empty()) throw UsageError("profiling needs at least one device");
  std::vector<Model> models;
  for (size_t d = 0; d < devices.size(); ++d) models.push_back(make_model());
  if (devices.size() == 1)
    return profile_costs(models[0], *devices[0], microbatch_size, repeats, seed);
  check_profile_arguments(microbatch_size, repeats);
  const int L = models[0].num_layers();
  const int wanted = chunks > 0 ? chunks : static_cast<int>(devices.size());
  std::vector<int> cuts = profile_chunks(
      models[0], std::min({wanted, static_cast<int>(devices.size()), L}), microbatch_size);
  if (cuts.empty()) cuts = {0, L};  // no split without cutting a skip: every device runs all
  const size_t n_chunks = cuts.size() - 1;
  std::vector<std::vector<LayerProfile>> each(devices.size());
  on_every_device(devices, [&](size_t d, std::barrier<>&) {
    const size_t c = d % n_chunks;  // more devices than chunks: the chunks run twice, averaged
    each[d] =
        profile_range(models[d], *devices[d], cuts[c], cuts[c + 1], microbatch_size, repeats, seed);
  });
  std::vector<LayerProfile> out(static_cast<size_t>(L));
  for (size_t l = 0; l < out.size(); ++l) {
    int n = 0;
    for (size_t d = 0; d < devices.size(); ++d) {
      const size_t c = d % n_chunks;
      if (static_cast<int>(l) < cuts[c] || static_cast<int>(l) >= cuts[c + 1]) continue;
      const LayerProfile& p = each[d][l];
      if (n++ == 0) {
        out[l] = p;
      } else {
        out[l].forward_s += p.forward_s;
        out[l].backward_input_s += p.backward_input_s;
        out[l].backward_weight_s += p.backward_weight_s;
      }
    }
    out[l].forward_s /= n;
    out[l].backward_input_s /= n;
    out[l].backward_weight_s /= n;
  }
  return out;
}

LayerProfiler profiler_on(const Model& model, const std::function<Model()>& make_model,
                          const std::vector<Backend*>& devices, int chunks) {
  if (devices.empty()) throw UsageError("profiling needs at least one device");
  if (devices.size() == 1 || !make_model)
    return {[&model, first = devices[0]](int64_t microbatch_size) {
              return profile_costs(model, *first, microbatch_size);
            },
            devices[0]->device().str()};
  return {[make_model, devices, chunks](int64_t microbatch_size) {
            return profile_costs_together(make_model, devices, microbatch_size, 3, 0, chunks);
          },
          every_device_at_once(devices)};
}

}  // namespace pt
