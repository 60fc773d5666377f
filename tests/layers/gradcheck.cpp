#include "tests/layers/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include <fmt/format.h>

#include "engine/core/random.h"
#include "kernels/cpu/cpu_backend.h"

namespace pt::test {

Backend& backend() {
  static const std::unique_ptr<Backend> be = make_cpu_backend(0, 1);
  return *be;
}

const StepInfo& check_step_info() {
  static const StepInfo info{/*seed=*/1234, /*step=*/5, /*microbatch=*/2, /*training=*/true};
  return info;
}

// ---- host <-> device ------------------------------------------------------------------------
Tensor to_device(Backend& be, const std::vector<float>& host, const Shape& shape) {
  Tensor t = be.empty(shape);
  if (static_cast<int64_t>(host.size()) != shape.numel())
    throw std::logic_error(
        fmt::format("to_device: {} values for shape {}", host.size(), shape.str()));
  if (t.bytes()) be.copy_from_host(t.data(), host.data(), t.bytes());
  return t;
}

Tensor to_device_i32(Backend& be, const std::vector<int32_t>& host, const Shape& shape) {
  Tensor t = be.empty(shape, DType::i32);
  if (static_cast<int64_t>(host.size()) != shape.numel())
    throw std::logic_error(
        fmt::format("to_device_i32: {} values for shape {}", host.size(), shape.str()));
  if (t.bytes()) be.copy_from_host(t.data(), host.data(), t.bytes());
  return t;
}

std::vector<float> to_host(Backend& be, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  be.synchronize();
  if (t.bytes()) be.copy_to_host(out.data(), t.f32(), t.bytes());
  return out;
}

std::vector<int32_t> to_host_i32(Backend& be, const Tensor& t) {
  std::vector<int32_t> out(static_cast<size_t>(t.numel()));
  be.synchronize();
  if (t.bytes()) be.copy_to_host(out.data(), t.i32(), t.bytes());
  return out;
}

// ---- random values --------------------------------------------------------------------------
std::vector<float> random_uniform(uint64_t seed, int64_t n, float lo, float hi) {
  CounterRng rng(hash_keys(seed, 0x5eed));
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = lo + (hi - lo) * static_cast<float>(rng.next_double());
  return v;
}

std::vector<float> random_away_from_zero(uint64_t seed, int64_t n, float min_abs) {
  CounterRng rng(hash_keys(seed, 0xa3a7));
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    const float mag = min_abs + (1.f - min_abs) * static_cast<float>(rng.next_double());
    x = rng.next_below(2) ? mag : -mag;
  }
  return v;
}

std::vector<float> random_distinct(uint64_t seed, int64_t n, float gap) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i - n / 2) * gap;
  CounterRng rng(hash_keys(seed, 0xd157));
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.next_below(i)]);
  return v;
}

std::vector<int32_t> random_ids(uint64_t seed, int64_t n, int64_t vocab) {
  CounterRng rng(hash_keys(seed, 0x1d5));
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& x : v) x = static_cast<int32_t>(rng.next_below(static_cast<uint64_t>(vocab)));
  return v;
}

BoundParams bind_random(Layer& layer, Backend& be, uint64_t seed, float scale, bool grad_random) {
  BoundParams bp;
  uint64_t k = 0;
  for (const ParamSpec& spec : layer.param_specs()) {
    Tensor p = be.zeros(spec.shape);
    Tensor g = be.zeros(spec.shape);
    be.copy_from_host(
        p.data(), random_uniform(hash_keys(seed, ++k), p.numel(), -scale, scale).data(), p.bytes());
    if (grad_random)
      be.copy_from_host(g.data(), random_uniform(hash_keys(seed, ++k), g.numel()).data(),
                        g.bytes());
    bp.params.push_back(p);
    bp.grads.push_back(g);
  }
  layer.bind(bp.params, bp.grads);
  return bp;
}

// ---- finite differences ---------------------------------------------------------------------
namespace {

constexpr uint64_t kLayerKey = 42;

// Compares analytic[i] with central differences of objective() in the elements of v.
void compare(GradReport& rep, const std::string& label, const Tensor& v,
             const std::vector<float>& analytic, const std::function<double()>& objective,
             const GradcheckOptions& opt) {
  Backend& be = backend();
  const int64_t n = v.numel();
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), int64_t{0});
  if (n > opt.max_per_tensor) {  // a fixed random subset
    CounterRng rng(hash_keys(opt.seed, 0x5b5e7));
    for (size_t i = idx.size(); i > 1; --i) std::swap(idx[i - 1], idx[rng.next_below(i)]);
    idx.resize(static_cast<size_t>(opt.max_per_tensor));
    std::sort(idx.begin(), idx.end());
  }
  double worst = 0;
  int64_t shown = 0, failures = 0;
  std::string details;
  for (int64_t i : idx) {
    float* at = v.f32() + i;
    float orig = 0;
    be.copy_to_host(&orig, at, sizeof(float));
    const float up = orig + opt.tol.eps, down = orig - opt.tol.eps;
    be.copy_from_host(at, &up, sizeof(float));
    const double lp = objective();
    be.copy_from_host(at, &down, sizeof(float));
    const double lm = objective();
    be.copy_from_host(at, &orig, sizeof(float));
    const double numeric = (lp - lm) / (static_cast<double>(up) - static_cast<double>(down));
    const double a = analytic[static_cast<size_t>(i)];
    const double bound = opt.tol.atol + opt.tol.rtol * std::abs(numeric);
    const double err = std::abs(a - numeric);
    worst = std::max(worst, err / bound);
    if (!(err <= bound)) {
      ++failures;
      if (shown++ < 5)
        details +=
            fmt::format("    {}[{}]: analytic {:.7g} vs numeric {:.7g} (|diff| {:.3g} > {:.3g})\n",
                        label, i, a, numeric, err, bound);
    }
  }
  rep.checked += static_cast<int64_t>(idx.size());
  rep.failures += failures;
  rep.worst = std::max(rep.worst, worst);
  rep.text += fmt::format("  {}: {} of {} checked, {} failed, worst |diff|/tol {:.3f}\n{}", label,
                          idx.size(), n, failures, worst, details);
}

void fail(GradReport& rep, const std::string& why) {
  ++rep.failures;
  rep.text += "  " + why + "\n";
}

}  // namespace

GradReport gradcheck_layer(Layer& layer, const Tensor& x, const GradcheckOptions& opt) {
  Backend& be = backend();
  GradReport rep;
  rep.text = fmt::format("gradcheck {} {} -> {} (eps {}, atol {}, rtol {}):\n", layer.kind(),
                         x.shape().str(), layer.output_shape().str(), opt.tol.eps, opt.tol.atol,
                         opt.tol.rtol);
  const std::vector<ParamSpec> specs = layer.param_specs();
  BoundParams bp = bind_random(layer, be, hash_keys(opt.seed, 0xa11), opt.param_scale, true);
  std::vector<std::vector<float>> g0;
  for (const Tensor& g : bp.grads) g0.push_back(to_host(be, g));

  const int64_t B = x.shape()[0];
  const Shape yshape = layer.output_shape().with_batch(B);
  const std::vector<float> dyh = random_uniform(hash_keys(opt.seed, 0xd7), yshape.numel());
  const Tensor dy = to_device(be, dyh, yshape);

  // ---- analytic ----
  LayerContext ctx(be, check_step_info(), kLayerKey);
  const Tensor y = layer.forward(x, ctx);
  if (y.shape() != yshape) {
    fail(rep, fmt::format("forward returned {} instead of {}", y.shape().str(), yshape.str()));
    return rep;
  }
  const Tensor dx = layer.backward_input(dy, ctx);
  for (size_t i = 0; i < bp.grads.size(); ++i)
    if (to_host(be, bp.grads[i]) != g0[i])
      fail(rep, fmt::format("backward_input changed the gradient of '{}'", specs[i].name));
  layer.backward_weight(dy, ctx);
  std::vector<std::vector<float>> dw;
  for (size_t i = 0; i < bp.grads.size(); ++i) {
    std::vector<float> g = to_host(be, bp.grads[i]);
    for (size_t j = 0; j < g.size(); ++j) g[j] -= g0[i][j];  // dW = grad - G0: "+=" is required
    dw.push_back(std::move(g));
  }

  // ---- numeric: L = sum(y * dy), in double ----
  const std::function<double()> objective = [&]() {
    LayerContext c(be, check_step_info(), kLayerKey);
    const std::vector<float> yh = to_host(be, layer.forward(x, c));
    double l = 0;
    for (size_t j = 0; j < yh.size(); ++j) l += static_cast<double>(yh[j]) * dyh[j];
    return l;
  };
  if (opt.check_input) {
    if (!dx.defined() || dx.shape() != x.shape())
      fail(rep,
           fmt::format("backward_input returned {} for input {}",
                       dx.defined() ? dx.shape().str() : "an undefined tensor", x.shape().str()));
    else
      compare(rep, "dx", x, to_host(be, dx), objective, opt);
  }
  for (size_t i = 0; i < bp.params.size(); ++i)
    compare(rep, "d" + specs[i].name, bp.params[i], dw[i], objective, opt);
  return rep;
}

GradReport gradcheck_loss(Loss& loss, const Tensor& prediction, const Tensor& target,
                          int64_t global_batch, const GradcheckOptions& opt) {
  Backend& be = backend();
  GradReport rep;
  rep.text = fmt::format("gradcheck {} {} (eps {}, atol {}, rtol {}):\n", loss.kind(),
                         prediction.shape().str(), opt.tol.eps, opt.tol.atol, opt.tol.rtol);
  LayerContext ctx(be, check_step_info(), kLayerKey);
  loss.forward(prediction, target, global_batch, ctx);
  const Tensor g = loss.backward(ctx);
  if (g.shape() != prediction.shape()) {
    fail(rep, fmt::format("backward returned {} for predictions {}", g.shape().str(),
                          prediction.shape().str()));
    return rep;
  }
  const std::function<double()> objective = [&]() {
    LayerContext c(be, check_step_info(), kLayerKey);
    return loss.forward(prediction, target, global_batch, c);
  };
  compare(rep, "dprediction", prediction, to_host(be, g), objective, opt);
  return rep;
}

}  // namespace pt::test
