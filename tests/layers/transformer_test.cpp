// The GPT layers: PositionEmbedding, CausalSelfAttention, TransformerBlock and the gpt() model.
// Finite differences of dx and every dW (gradcheck.h tolerances; the model end to end with its
// own loop below), causality, variable sequence lengths, the backward_input / backward_weight
// contract (micro-batches in zero-bubble order), costs, and the shape errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/core/random.h"
#include "engine/report/compare.h"
#include "layers/layers.h"
#include "layers/zoo.h"
#include "tests/layers/gradcheck.h"

using namespace pt;
using namespace pt::test;

namespace {

void check_ok(const GradReport& r) {
  INFO(r.text);
  CHECK(r.ok());
  if (std::getenv("PIPETRAIN_GRADCHECK_VERBOSE") != nullptr) MESSAGE(r.text);  // worst ratios
}

GradcheckOptions options(const Tolerance& tol, uint64_t seed) {
  GradcheckOptions o;
  o.tol = tol;
  o.seed = seed;
  return o;
}

Tensor uniform_input(const Shape& s, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  return to_device(backend(), random_uniform(seed, s.numel(), lo, hi), s);
}

// Positions [0, keep) of every sequence of x (B, T, C), as a flat host vector.
std::vector<float> first_positions(const std::vector<float>& x, int64_t B, int64_t T, int64_t C,
                                   int64_t keep) {
  std::vector<float> out;
  for (int64_t b = 0; b < B; ++b) {
    const auto begin = x.begin() + static_cast<std::ptrdiff_t>(b * T * C);
    out.insert(out.end(), begin, begin + static_cast<std::ptrdiff_t>(keep * C));
  }
  return out;
}

// The largest |a - b|; a NaN on either side is +inf (std::max would ignore it).
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  return compare_tensors(a, b).max_abs;
}

}  // namespace

// ---- finite differences of each layer ------------------------------------------------------
TEST_CASE("gradcheck: position embedding") {
  PositionEmbedding p(/*context=*/5, /*d_model=*/3);
  check_ok(gradcheck_layer(p, uniform_input(Shape{2, 5, 3}, 1), options(kExact, 1)));
}

TEST_CASE("gradcheck: causal self-attention") {
  SUBCASE("2 heads of 4, T = 5") {
    CausalSelfAttention a(/*d_model=*/8, /*n_heads=*/2, /*context=*/5);
    check_ok(gradcheck_layer(a, uniform_input(Shape{2, 5, 8}, 2), options(kSmooth, 2)));
  }
  SUBCASE("T = 1 (attends to itself only)") {
    CausalSelfAttention a(6, 3, 1);
    check_ok(gradcheck_layer(a, uniform_input(Shape{3, 1, 6}, 3), options(kSmooth, 3)));
  }
  SUBCASE("T = 70 crosses the kernel's query and key blocks") {
    CausalSelfAttention a(4, 2, 70);
    GradcheckOptions o = options(kSmooth, 4);
    o.param_scale = 1.f;  // sharper softmax rows
    check_ok(gradcheck_layer(a, uniform_input(Shape{1, 70, 4}, 4), o));
  }
}

TEST_CASE("gradcheck: transformer block") {
  SUBCASE("d 8, 2 heads, T = 5") {
    TransformerBlock t(8, 2, 5);
    check_ok(gradcheck_layer(t, uniform_input(Shape{2, 5, 8}, 5), options(kSmooth, 5)));
  }
  SUBCASE("d 6, 3 heads, mlp ratio 2, T = 4") {
    TransformerBlock t(6, 3, 4, /*mlp_ratio=*/2);
    check_ok(gradcheck_layer(t, uniform_input(Shape{3, 4, 6}, 6), options(kSmooth, 6)));
  }
}

// ---- the gpt() model end to end ------------------------------------------------------------
namespace {

// Runs every layer and the loss of `m` on (ids, targets); returns the loss summed over tokens
// (the loss share times global_batch * T), so gradients are O(1) and the tolerances bite.
struct ModelRunner {
  Model& m;
  Tensor ids, targets;
  int64_t B, T;

  double loss(LayerContext& root) const {
    Tensor h = ids;
    for (int i = 0; i < m.num_layers(); ++i)
      h = m.layer(i).forward(h, root.child(static_cast<size_t>(i)));
    return m.loss().forward(h, targets, B, root.child(static_cast<size_t>(m.num_layers()))) *
           static_cast<double>(B * T);
  }
  double loss() const {
    LayerContext root(backend(), check_step_info(), 9);
    return loss(root);
  }
  // Forward, then backward_input and backward_weight of every layer, last to first.
  void backward() const {
    LayerContext root(backend(), check_step_info(), 9);
    loss(root);
    Tensor g = m.loss().backward(root.child(static_cast<size_t>(m.num_layers())));
    for (int i = m.num_layers(); i-- > 0;) {
      LayerContext& c = root.child(static_cast<size_t>(i));
      const Tensor dx = m.layer(i).backward_input(g, c);
      m.layer(i).backward_weight(g, c);
      g = dx;
    }
  }
};

}  // namespace

TEST_CASE("gradcheck: a tiny gpt() end to end (every parameter of every layer)") {
  Backend& be = backend();
  const int64_t vocab = 7, context = 4, d = 8, B = 2;
  Model m = gpt(vocab, context, d, /*n_layers=*/2, /*n_heads=*/2);
  std::vector<BoundParams> bound;
  for (int i = 0; i < m.num_layers(); ++i)
    bound.push_back(bind_random(m.layer(i), be, 100 + static_cast<uint64_t>(i), 0.5f, false));
  const ModelRunner run{m, to_device_i32(be, random_ids(1, B * context, vocab), Shape{B, context}),
                        to_device_i32(be, random_ids(2, B * context, vocab), Shape{B, context}), B,
                        context};
  run.backward();
  const float eps = kSmooth.eps;
  const double scale = static_cast<double>(B * context);  // run.loss() sums over tokens
  int64_t checked = 0, failures = 0;
  double worst = 0;
  std::string text;
  for (int i = 0; i < m.num_layers(); ++i) {
    const auto specs = m.layer(i).param_specs();
    for (size_t k = 0; k < specs.size(); ++k) {
      const Tensor& p = bound[static_cast<size_t>(i)].params[k];
      const std::vector<float> analytic = to_host(be, bound[static_cast<size_t>(i)].grads[k]);
      double tensor_worst = 0;
      for (int64_t j = 0; j < p.numel(); ++j) {
        float* at = p.f32() + j;
        const float orig = *at;
        *at = orig + eps;
        const double lp = run.loss();
        *at = orig - eps;
        const double lm = run.loss();
        *at = orig;
        const double numeric = (lp - lm) / (2.0 * static_cast<double>(eps));
        const double a = analytic[static_cast<size_t>(j)] * scale;
        const double ratio =
            std::abs(a - numeric) / (kSmooth.atol + kSmooth.rtol * std::abs(numeric));
        tensor_worst = std::max(tensor_worst, ratio);
        ++checked;
        if (!(ratio <= 1.0) && failures++ < 8)
          text += fmt::format("  {}.{}[{}]: analytic {:.7g} vs numeric {:.7g}\n", m.layer(i).name(),
                              specs[k].name, j, a, numeric);
      }
      worst = std::max(worst, tensor_worst);
      text += fmt::format("  {}.{}: {} checked, worst |diff|/tol {:.3f}\n", m.layer(i).name(),
                          specs[k].name, p.numel(), tensor_worst);
    }
  }
  INFO(text);
  CHECK(checked == m.param_count());
  CHECK(failures == 0);
  if (std::getenv("PIPETRAIN_GRADCHECK_VERBOSE") != nullptr) MESSAGE(text);
}

// ---- causality and variable sequence lengths -----------------------------------------------
TEST_CASE("a tied parameter counts once in unique_param_count(), once per copy in param_count()") {
  const Model tied = gpt(64, 8, 16, 1, 2, true), untied = gpt(64, 8, 16, 1, 2, false);
  CHECK(tied.param_count() == untied.param_count());
  CHECK(tied.unique_param_count() == tied.param_count() - 64 * 16);
  CHECK(untied.unique_param_count() == untied.param_count());
  // GPT-2 124M as llm.c builds it (vocab padded to 50304): llm.c's parameter count exactly.
  CHECK(gpt(50304, 1024, 768, 12, 12, true).unique_param_count() == 124'475'904);
}

TEST_CASE("a block's outputs at positions <= t do not depend on inputs after t") {
  Backend& be = backend();
  const int64_t B = 2, T = 6, d = 8, t = 2;
  TransformerBlock blk(d, 2, T);
  bind_random(blk, be, 7);
  std::vector<float> xa = random_uniform(8, B * T * d);
  std::vector<float> xb = xa;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = (t + 1) * d; i < T * d; ++i) xb[static_cast<size_t>(b * T * d + i)] += 0.5f;
  LayerContext ca(be, check_step_info(), 1), cb(be, check_step_info(), 1);
  const auto ya = to_host(be, blk.forward(to_device(be, xa, Shape{B, T, d}), ca));
  const auto yb = to_host(be, blk.forward(to_device(be, xb, Shape{B, T, d}), cb));
  CHECK(first_positions(ya, B, T, d, t + 1) == first_positions(yb, B, T, d, t + 1));
  CHECK(first_positions(ya, B, T, d, t + 2) != first_positions(yb, B, T, d, t + 2));
}

TEST_CASE("variable length: T' = 3 and T' = 5 on one block agree on the first 3 positions") {
  Backend& be = backend();
  const int64_t B = 2, d = 8;
  TransformerBlock blk(d, 2, /*context=*/5);
  bind_random(blk, be, 9);
  const std::vector<float> x5 = random_uniform(10, B * 5 * d);
  const std::vector<float> x3 = first_positions(x5, B, 5, d, 3);
  LayerContext c5(be, check_step_info(), 1), c3(be, check_step_info(), 1);
  const auto y5 = to_host(be, blk.forward(to_device(be, x5, Shape{B, 5, d}), c5));
  const auto y3 = to_host(be, blk.forward(to_device(be, x3, Shape{B, 3, d}), c3));
  REQUIRE(y3.size() == static_cast<size_t>(B * 3 * d));
  // Per-row GEMMs of another height may round differently: allow float rounding.
  CHECK(max_abs_diff(first_positions(y5, B, 5, d, 3), y3) <= 1e-6);
}

TEST_CASE("variable length: gradients at T' = 3 on a context-8 layer equal a context-3 layer's") {
  Backend& be = backend();
  const int64_t B = 2, T = 3, d = 8;
  const Tensor x = uniform_input(Shape{B, T, d}, 11);
  const Tensor dy = uniform_input(Shape{B, T, d}, 12);
  auto run = [&](Layer& long_layer, Layer& short_layer) {
    // Same parameters, separate zeroed gradients.
    const BoundParams lp = bind_random(long_layer, be, 13, 0.5f, false);
    BoundParams sp;
    for (const Tensor& p : lp.params) {
      sp.params.push_back(p);
      sp.grads.push_back(be.zeros(p.shape()));
    }
    short_layer.bind(sp.params, sp.grads);
    LayerContext cl(be, check_step_info(), 1), cs(be, check_step_info(), 1);
    const auto yl = to_host(be, long_layer.forward(x, cl));
    const auto ys = to_host(be, short_layer.forward(x, cs));
    const auto dxl = to_host(be, long_layer.backward_input(dy, cl));
    const auto dxs = to_host(be, short_layer.backward_input(dy, cs));
    long_layer.backward_weight(dy, cl);
    short_layer.backward_weight(dy, cs);
    CHECK(max_abs_diff(yl, ys) <= 1e-6);
    CHECK(max_abs_diff(dxl, dxs) <= 1e-6);
    for (size_t i = 0; i < lp.grads.size(); ++i) {
      INFO(long_layer.param_specs()[i].name);
      CHECK(max_abs_diff(to_host(be, lp.grads[i]), to_host(be, sp.grads[i])) <= 1e-5);
    }
  };
  SUBCASE("attention") {
    CausalSelfAttention a8(d, 2, 8), a3(d, 2, 3);
    run(a8, a3);
  }
  SUBCASE("block") {
    TransformerBlock b8(d, 2, 8), b3(d, 2, 3);
    run(b8, b3);
  }
}

TEST_CASE("variable length: position embedding adds rows [0, T') and updates only those") {
  Backend& be = backend();
  const int64_t B = 3, T = 2, context = 5, d = 4;
  PositionEmbedding p(context, d);
  const BoundParams bp = bind_random(p, be, 14, 0.5f, /*grad_random=*/false);
  const auto w = to_host(be, bp.params[0]);
  const auto xh = random_uniform(15, B * T * d), dyh = random_uniform(16, B * T * d);
  LayerContext ctx(be, check_step_info(), 1);
  const auto y = to_host(be, p.forward(to_device(be, xh, Shape{B, T, d}), ctx));
  const Tensor dy = to_device(be, dyh, Shape{B, T, d});
  CHECK(p.backward_input(dy, ctx).data() == dy.data());  // the identity, no copy
  p.backward_weight(dy, ctx);
  const auto dw = to_host(be, bp.grads[0]);
  for (int64_t t = 0; t < context; ++t)
    for (int64_t c = 0; c < d; ++c) {
      double want = 0;
      for (int64_t b = 0; b < B && t < T; ++b) {
        const size_t i = static_cast<size_t>((b * T + t) * d + c);
        CHECK(y[i] == doctest::Approx(xh[i] + w[static_cast<size_t>(t * d + c)]));
        want += dyh[i];
      }
      CHECK(dw[static_cast<size_t>(t * d + c)] == doctest::Approx(want));  // rows >= T stay 0
    }
}

// ---- the backward_input / backward_weight contract -----------------------------------------
TEST_CASE("backward_input leaves parameter gradients untouched; backward_weight adds") {
  Backend& be = backend();
  TransformerBlock blk(8, 2, 5);
  const BoundParams bp = bind_random(blk, be, 17);  // random gradients G0
  std::vector<std::vector<float>> g0;
  for (const Tensor& g : bp.grads) g0.push_back(to_host(be, g));
  LayerContext ctx(be, check_step_info(), 1);
  const Tensor x = uniform_input(Shape{2, 5, 8}, 18);
  const Tensor dy = uniform_input(Shape{2, 5, 8}, 19);
  blk.forward(x, ctx);
  blk.backward_input(dy, ctx);
  for (size_t i = 0; i < bp.grads.size(); ++i) {
    INFO(blk.param_specs()[i].name);
    CHECK(to_host(be, bp.grads[i]) == g0[i]);
  }
  CHECK_THROWS_AS(blk.backward_input(dy, ctx), UsageError);  // twice without clear()
  blk.backward_weight(dy, ctx);
  for (size_t i = 0; i < bp.grads.size(); ++i) {
    INFO(blk.param_specs()[i].name);
    CHECK(to_host(be, bp.grads[i]) != g0[i]);
  }
}

TEST_CASE("micro-batches in zero-bubble order accumulate to the full batch's gradients") {
  Backend& be = backend();
  const int64_t B = 5, T = 4, d = 8;
  TransformerBlock blk(d, 2, T);
  const Tensor x = uniform_input(Shape{B, T, d}, 20);
  const Tensor dy = uniform_input(Shape{B, T, d}, 21);
  // Full batch from zero.
  const BoundParams bp = bind_random(blk, be, 22, 0.5f, false);
  {
    LayerContext ctx(be, check_step_info(), 1);
    blk.forward(x, ctx);
    blk.backward_input(dy, ctx);
    blk.backward_weight(dy, ctx);
  }
  std::vector<std::vector<float>> want;
  for (const Tensor& g : bp.grads) want.push_back(to_host(be, g));
  // Micro-batches {2, 1, 2}: F and I of each, then W of each; gradients start at G0 = 1.
  for (const Tensor& g : bp.grads) be.fill(g.f32(), 1.f, g.numel());
  const int64_t sizes[] = {2, 1, 2};
  std::vector<std::unique_ptr<LayerContext>> ctxs;
  int64_t first = 0;
  for (int64_t n : sizes) {
    ctxs.push_back(std::make_unique<LayerContext>(be, check_step_info(), 1));
    blk.forward(x.slice_rows(first, n), *ctxs.back());
    blk.backward_input(dy.slice_rows(first, n), *ctxs.back());
    first += n;
  }
  first = 0;
  for (size_t m = 0; m < ctxs.size(); ++m) {
    blk.backward_weight(dy.slice_rows(first, sizes[m]), *ctxs[m]);
    first += sizes[m];
  }
  for (size_t i = 0; i < bp.grads.size(); ++i) {
    INFO(blk.param_specs()[i].name);
    std::vector<float> got = to_host(be, bp.grads[i]);
    for (float& v : got) v -= 1.f;
    CHECK(max_abs_diff(got, want[i]) <= 1e-5);
  }
}

// ---- parameters, costs, the model ----------------------------------------------------------
TEST_CASE("transformer block: parameter names, GPT-2 init, saved bytes match cost()") {
  TransformerBlock blk(8, 2, 5, 4, /*residual_proj_std=*/0.01f);
  std::vector<std::string> names;
  for (const ParamSpec& s : blk.param_specs()) names.push_back(s.name);
  CHECK(names == std::vector<std::string>{"ln1.weight", "ln1.bias", "attn.qkv.weight",
                                          "attn.qkv.bias", "attn.proj.weight", "attn.proj.bias",
                                          "ln2.weight", "ln2.bias", "mlp.fc.weight", "mlp.fc.bias",
                                          "mlp.proj.weight", "mlp.proj.bias"});
  CHECK(blk.param_count() == 12 * 8 * 8 + 13 * 8);
  const auto specs = blk.param_specs();
  CHECK(specs[2].init.kind == ParamInit::Kind::normal);
  CHECK(specs[2].init.a == 0.02f);
  CHECK(specs[4].init.a == 0.01f);   // attn.proj.weight: into the residual stream
  CHECK(specs[8].init.a == 0.02f);   // mlp.fc.weight
  CHECK(specs[10].init.a == 0.01f);  // mlp.proj.weight: into the residual stream
  CHECK(specs[9].init.kind == ParamInit::Kind::zeros);
  CHECK(specs[0].init.kind == ParamInit::Kind::ones);

  Backend& be = backend();
  const int64_t B = 3;
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<PositionEmbedding>(5, 8));
  layers.push_back(std::make_unique<CausalSelfAttention>(8, 2, 5));
  layers.push_back(std::make_unique<TransformerBlock>(8, 2, 5));
  for (const auto& l : layers) {
    INFO(l->kind());
    bind_random(*l, be, 23);
    const Tensor x = uniform_input(l->input_shape().with_batch(B), 24);
    const StepInfo train{1, 1, 0, true}, eval{1, 1, 0, false};
    LayerContext ct(be, train, 1), ce(be, eval, 1);
    CHECK(l->forward(x, ct).shape() == l->output_shape().with_batch(B));
    CHECK(ct.saved_bytes() == static_cast<size_t>(B * l->cost().activation_bytes));
    l->forward(x, ce);
    CHECK(ce.saved_bytes() == 0);
    CHECK(l->cost().forward_flops > 0);
  }
  // Attention FLOPs: the projections plus 2 (T, T, Dh) products halved by causality.
  const LayerCost c = CausalSelfAttention(8, 2, 5).cost();
  CHECK(c.forward_flops == 2.0 * 5 * 8 * 24 + 2.0 * 5 * 8 * 8 + 2.0 * 5 * 6 * 8);
}

TEST_CASE("gpt(): one top-level layer per block, names, parameter count") {
  const int64_t vocab = 11, context = 6, d = 8;
  const int L = 3;
  Model m = gpt(vocab, context, d, L, 2);
  REQUIRE(m.num_layers() == L + 4);
  CHECK(m.input_shape() == Shape{context});
  CHECK(m.input_dtype() == DType::i32);
  CHECK(m.layer(0).kind() == "embedding");
  CHECK(m.layer(1).kind() == "position_embedding");
  for (int i = 0; i < L; ++i) {
    CHECK(m.layer(2 + i).kind() == "transformer_block");
    CHECK(m.layer(2 + i).name() == fmt::format("block{}", i));
  }
  CHECK(m.layer(L + 2).name() == "ln_f");
  CHECK(m.layer(L + 3).name() == "lm_head");
  CHECK(m.output_shape() == Shape{context, vocab});
  CHECK(m.loss().target_shape() == Shape{context});
  CHECK(m.param_count() == vocab * d + context * d + L * (12 * d * d + 13 * d) + 2 * d + d * vocab);
  // Residual projections start at 0.02 / sqrt(2 L).
  CHECK(m.layer(2).param_specs()[4].init.a == doctest::Approx(0.02 / std::sqrt(6.0)));
  CHECK(m.summary().find("block2") != std::string::npos);
}

// ---- errors --------------------------------------------------------------------------------
TEST_CASE("transformer shape errors") {
  CHECK_THROWS_WITH_AS(CausalSelfAttention(10, 3, 4),
                       "causal_self_attention: d_model 10 is not divisible by n_heads 3; choose "
                       "n_heads dividing d_model (each head gets d_model / n_heads channels)",
                       ShapeError);
  CHECK_THROWS_AS(TransformerBlock(10, 4, 4), ShapeError);
  CHECK_THROWS_AS(gpt(50, 16, 10, 2, 3), ShapeError);
  CHECK_THROWS_WITH_AS(gpt(50, 16, 8, 0, 2), "gpt: n_layers must be positive but got 0",
                       ShapeError);
  CHECK_THROWS_WITH_AS(PositionEmbedding(0, 8),
                       "position_embedding: context must be positive but got 0", ShapeError);
  CHECK_THROWS_WITH_AS(TransformerBlock(8, 2, 4, 0),
                       "transformer_block: mlp_ratio must be positive but got 0", ShapeError);

  Backend& be = backend();
  TransformerBlock blk(8, 2, 5);
  bind_random(blk, be, 25);
  LayerContext ctx(be, check_step_info(), 1);
  CHECK_THROWS_WITH_AS(blk.forward(uniform_input(Shape{2, 6, 8}, 26), ctx),
                       "transformer_block: expects input (B, T, 8) with 1 <= T <= 5 (the context "
                       "it was built for) but got (2, 6, 8)",
                       ShapeError);
  CHECK_THROWS_AS(blk.forward(uniform_input(Shape{2, 5, 6}, 27), ctx), ShapeError);
  CHECK_THROWS_AS(blk.forward(uniform_input(Shape{10, 8}, 28), ctx), ShapeError);
  CHECK_THROWS_AS(blk.backward_weight(uniform_input(Shape{2, 5, 8}, 29), ctx), UsageError);

  CausalSelfAttention att(8, 2, 5);
  bind_random(att, be, 30);
  LayerContext ca(be, check_step_info(), 1);
  CHECK_THROWS_AS(att.backward_input(uniform_input(Shape{2, 4, 8}, 31), ca), UsageError);
  att.forward(uniform_input(Shape{2, 4, 8}, 32), ca);
  CHECK_THROWS_WITH_AS(att.backward_input(uniform_input(Shape{2, 3, 8}, 33), ca),
                       "causal_self_attention: the gradient is (2, 3, 8) but forward ran on "
                       "(2, 4, 8); backward needs the gradient of that same forward",
                       ShapeError);
  CHECK_THROWS_AS(att.backward_weight(uniform_input(Shape{2, 4, 8}, 34), ca), UsageError);

  PositionEmbedding pos(5, 8);
  bind_random(pos, be, 35);
  CHECK_THROWS_AS(pos.forward(uniform_input(Shape{1, 7, 8}, 36), ctx), ShapeError);
}
