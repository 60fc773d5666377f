// Gradient accumulation over M = 3 uneven micro-batches: the parameter gradients accumulated
// micro-batch by micro-batch must equal the full batch's, and must be ADDED to what the
// gradient buffers held (a layer that assigns dW = ... instead of dW += ... fails).
// The micro-batches run in zero-bubble order: F and I of all three, then W of all three, each
// with its own context, so a layer that keeps backward state outside its context also fails.
// Then the same with the gradients holding NaN and the first micro-batch's W told they are
// unwritten (run_backward_weight, as the trainers start each step): a layer that writes them
// (Linear, GEMM beta 0) or is zeroed first must give the full batch's gradients, not NaN.
// Tolerance: |a - b| <= 1e-5 + 1e-4 |b| (fp32; the sums run in another order).
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "layers/layers.h"
#include "tests/layers/gradcheck.h"

using namespace pt;
using namespace pt::test;

namespace {

constexpr double kAtol = 1e-5, kRtol = 1e-4;

// Returns "" when every element matches, else the first mismatches.
std::string compare_close(const std::string& label, const std::vector<float>& got,
                          const std::vector<float>& want) {
  if (got.size() != want.size())
    return fmt::format("{}: {} vs {} elements\n", label, got.size(), want.size());
  std::string out;
  int shown = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= kAtol + kRtol * std::abs(static_cast<double>(want[i]))) && shown++ < 5)
      out += fmt::format("  {}[{}]: {} vs {}\n", label, i, got[i], want[i]);
  }
  return out;
}

// x: the whole batch (B, ...); sizes: the micro-batch sizes (sum B).
void check_accumulation(Layer& layer, const Tensor& x, const std::vector<int64_t>& sizes,
                        uint64_t seed, bool unwritten) {
  Backend& be = backend();
  const int64_t B = x.shape()[0];
  const Shape yshape = layer.output_shape().with_batch(B);
  const Tensor dy = to_device(be, random_uniform(seed, yshape.numel()), yshape);
  const std::vector<ParamSpec> specs = layer.param_specs();
  REQUIRE(!specs.empty());

  // ---- full batch, gradients from zero ----
  BoundParams bp = bind_random(layer, be, seed, 0.5f, /*grad_random=*/false);
  const StepInfo full_info;
  LayerContext full(be, full_info, 7);
  layer.forward(x, full);
  const Tensor dx_full = layer.backward_input(dy, full);
  layer.backward_weight(dy, full);
  std::vector<std::vector<float>> want;
  for (const Tensor& g : bp.grads) want.push_back(to_host(be, g));

  // ---- the same batch in micro-batches, gradients starting from G0 (NaN when unwritten) ----
  std::vector<std::vector<float>> g0;
  for (size_t i = 0; i < bp.grads.size(); ++i) {
    g0.push_back(unwritten ? std::vector<float>(static_cast<size_t>(bp.grads[i].numel()), NAN)
                           : random_uniform(seed + 100 + i, bp.grads[i].numel()));
    be.copy_from_host(bp.grads[i].data(), g0.back().data(), bp.grads[i].bytes());
  }
  std::vector<StepInfo> infos(sizes.size());
  std::vector<std::unique_ptr<LayerContext>> ctxs;
  std::vector<Tensor> dys;
  std::string errors;
  int64_t first = 0;
  for (size_t m = 0; m < sizes.size(); ++m) {  // F and I of every micro-batch
    infos[m].microbatch = static_cast<int>(m);
    ctxs.push_back(std::make_unique<LayerContext>(be, infos[m], 7));
    layer.forward(x.slice_rows(first, sizes[m]), *ctxs[m]);
    dys.push_back(dy.slice_rows(first, sizes[m]));
    const Tensor dx = layer.backward_input(dys[m], *ctxs[m]);
    if (dx_full.defined())
      errors += compare_close(fmt::format("dx of micro-batch {}", m), to_host(be, dx),
                              to_host(be, dx_full.slice_rows(first, sizes[m])));
    first += sizes[m];
  }
  REQUIRE(first == B);
  for (size_t m = 0; m < sizes.size(); ++m)  // W
    run_backward_weight(layer, dys[m], *ctxs[m], unwritten && m == 0);
  for (size_t i = 0; i < bp.grads.size(); ++i) {
    std::vector<float> got = to_host(be, bp.grads[i]);
    if (!unwritten)
      for (size_t j = 0; j < got.size(); ++j) got[j] -= g0[i][j];
    errors += compare_close("d" + specs[i].name, got, want[i]);
  }
  INFO(layer.kind(), unwritten ? " (gradients unwritten)" : "", " over micro-batches of ",
       fmt::format("{}", fmt::join(sizes, ", ")), ":\n", errors);
  CHECK(errors.empty());
}

Tensor uniform_input(const Shape& s, uint64_t seed) {
  return to_device(backend(), random_uniform(seed, s.numel()), s);
}

}  // namespace

TEST_CASE("accumulation over 3 uneven micro-batches: linear on (B, T, C)") {
  Linear l(Shape{3, 5}, 4);
  for (bool unwritten : {false, true})
    check_accumulation(l, uniform_input(Shape{7, 3, 5}, 1), {3, 2, 2}, 11, unwritten);
}

TEST_CASE("accumulation over 3 uneven micro-batches: conv2d stride 2 padding 1") {
  Conv2d c(Shape{2, 6, 6}, 3, 3, 2, 1);
  for (bool unwritten : {false, true})
    check_accumulation(c, uniform_input(Shape{6, 2, 6, 6}, 2), {1, 4, 1}, 12, unwritten);
}

TEST_CASE("accumulation over 3 uneven micro-batches: layernorm") {
  LayerNorm ln(Shape{2, 8});
  for (bool unwritten : {false, true})
    check_accumulation(ln, uniform_input(Shape{7, 2, 8}, 3), {2, 2, 3}, 13, unwritten);
}

TEST_CASE("accumulation over 3 uneven micro-batches: embedding") {
  Embedding e(Shape{5}, 6, 4);
  for (bool unwritten : {false, true})
    check_accumulation(e, to_device_i32(backend(), random_ids(4, 35, 6), Shape{7, 5}), {3, 1, 3},
                       14, unwritten);
}

TEST_CASE("accumulation over 3 uneven micro-batches: residual (linear, gelu, linear)") {
  std::vector<std::unique_ptr<Layer>> body;
  body.push_back(std::make_unique<Linear>(Shape{2, 4}, 6));
  body.push_back(std::make_unique<ActivationLayer>(Shape{2, 6}, Activation::gelu_erf));
  body.push_back(std::make_unique<Linear>(Shape{2, 6}, 4));
  Residual r(Shape{2, 4}, std::move(body));
  for (bool unwritten : {false, true})
    check_accumulation(r, uniform_input(Shape{7, 2, 4}, 5), {3, 2, 2}, 15, unwritten);
}
