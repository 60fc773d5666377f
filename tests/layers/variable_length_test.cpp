// Variable sequence length end to end: Embedding, Linear and LayerNorm built on a sequence of T
// positions, and SoftmaxCrossEntropy over (T, classes), also run on a shorter T' (1 <= T' <= T).
// Checked here: shapes; agreement with the first T' positions of a full-length run; the loss as
// the mean over the T' tokens present; finite differences at T' < T (gradcheck.h, through a
// view that presents the layer as if it were built for T'); the gpt() model at T' = 3 and 8;
// the Trainer stepping on T' = 5 after T' = 8; and the shape errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "engine/core/error.h"
#include "engine/report/compare.h"
#include "engine/train/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/layers.h"
#include "layers/zoo.h"
#include "tests/layers/gradcheck.h"

using namespace pt;
using namespace pt::test;

namespace {

// Presents a layer built for (T, ...) as a layer built for (T', ...), so gradcheck_layer (which
// sizes dy from output_shape()) checks the real layer's gradients at T' < T. It owns no state:
// forward and backward go to the wrapped layer with the same context.
class ShorterView final : public Layer {
 public:
  ShorterView(Layer& inner, int64_t t_short)
      : Layer(inner.name(), with_first(inner.input_shape(), t_short)), inner_(&inner) {
    output_shape_ = with_first(inner.output_shape(), t_short);
  }
  std::string_view kind() const override { return inner_->kind(); }
  DType input_dtype() const override { return inner_->input_dtype(); }
  std::vector<ParamSpec> param_specs() const override { return inner_->param_specs(); }
  LayerCost cost() const override { return inner_->cost(); }
  void bind(std::span<const Tensor> params, std::span<const Tensor> grads) override {
    inner_->bind(params, grads);
    Layer::bind(params, grads);
  }
  void unbind() override {
    inner_->unbind();
    Layer::unbind();
  }
  Tensor forward(const Tensor& x, LayerContext& ctx) override { return inner_->forward(x, ctx); }
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override {
    return inner_->backward_input(dy, ctx);
  }
  void backward_weight(const Tensor& dy, LayerContext& ctx) override {
    inner_->backward_weight(dy, ctx);
  }

 private:
  static Shape with_first(Shape s, int64_t first) {
    s[0] = first;
    return s;
  }
  Layer* inner_;
};

void check_ok(const GradReport& r) {
  INFO(r.text);
  CHECK(r.ok());
}

GradcheckOptions options(const Tolerance& tol, uint64_t seed) {
  GradcheckOptions o;
  o.tol = tol;
  o.seed = seed;
  return o;
}

// Positions [0, keep) of every row b of x (B, T, C), as a flat host vector.
std::vector<float> first_positions(const std::vector<float>& x, int64_t B, int64_t T, int64_t C,
                                   int64_t keep) {
  std::vector<float> out;
  for (int64_t b = 0; b < B; ++b) {
    const auto begin = x.begin() + static_cast<std::ptrdiff_t>(b * T * C);
    out.insert(out.end(), begin, begin + static_cast<std::ptrdiff_t>(keep * C));
  }
  return out;
}
std::vector<int32_t> first_ids(const std::vector<int32_t>& x, int64_t B, int64_t T, int64_t keep) {
  std::vector<int32_t> out;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < keep; ++t) out.push_back(x[static_cast<size_t>(b * T + t)]);
  return out;
}

// The largest |a - b|; a NaN on either side is +inf (std::max would ignore it).
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  return compare_tensors(a, b).max_abs;
}

// Forward of every layer of `m` (bound), then the loss; returns (logits, loss share).
struct ModelOutput {
  std::vector<float> logits;
  Shape shape;
  double loss = 0;
};
ModelOutput run_model(Model& m, const Tensor& ids, const Tensor& targets, int64_t global_batch) {
  LayerContext root(backend(), check_step_info(), 5);
  Tensor h = ids;
  for (int i = 0; i < m.num_layers(); ++i)
    h = m.layer(i).forward(h, root.child(static_cast<size_t>(i)));
  ModelOutput out;
  out.shape = h.shape();
  out.logits = to_host(backend(), h);
  out.loss =
      m.loss().forward(h, targets, global_batch, root.child(static_cast<size_t>(m.num_layers())));
  return out;
}

}  // namespace

// ---- single layers: T' < T agrees with the first T' positions of a T run -------------------
TEST_CASE("variable length: embedding, linear and layernorm at T' = 3 and T' = 8 (built for 8)") {
  Backend& be = backend();
  const int64_t B = 2, T = 8, C = 5, vocab = 11;
  SUBCASE("embedding") {
    Embedding e(Shape{T}, vocab, C);
    bind_random(e, be, 1);
    const auto ids8 = random_ids(2, B * T, vocab);
    LayerContext c8(be, check_step_info(), 1), c3(be, check_step_info(), 1);
    const Tensor y8 = e.forward(to_device_i32(be, ids8, Shape{B, T}), c8);
    const Tensor y3 = e.forward(to_device_i32(be, first_ids(ids8, B, T, 3), Shape{B, 3}), c3);
    CHECK(y8.shape() == Shape{B, T, C});
    CHECK(y3.shape() == Shape{B, 3, C});
    CHECK(first_positions(to_host(be, y8), B, T, C, 3) == to_host(be, y3));
  }
  SUBCASE("linear and layernorm on (T, C)") {
    Linear lin(Shape{T, C}, 4);
    LayerNorm ln(Shape{T, C});
    for (Layer* l : {static_cast<Layer*>(&lin), static_cast<Layer*>(&ln)}) {
      INFO(l->kind());
      bind_random(*l, be, 3);
      const int64_t out = l->output_shape().back();
      const auto x8 = random_uniform(4, B * T * C);
      LayerContext c8(be, check_step_info(), 1), c3(be, check_step_info(), 1);
      const Tensor y8 = l->forward(to_device(be, x8, Shape{B, T, C}), c8);
      const Tensor y3 =
          l->forward(to_device(be, first_positions(x8, B, T, C, 3), Shape{B, 3, C}), c3);
      CHECK(y8.shape() == Shape{B, T, out});
      CHECK(y3.shape() == Shape{B, 3, out});
      // A GEMM of another height may round differently: allow float rounding.
      CHECK(max_abs_diff(first_positions(to_host(be, y8), B, T, out, 3), to_host(be, y3)) <= 1e-6);
      // backward at T' = 3 gives dx of the same shape as x.
      const Tensor dy = to_device(be, random_uniform(5, B * 3 * out), Shape{B, 3, out});
      CHECK(l->backward_input(dy, c3).shape() == Shape{B, 3, C});
      l->backward_weight(dy, c3);
    }
  }
}

// ---- finite differences at T' < T ----------------------------------------------------------
TEST_CASE("gradcheck at T' = 3 on layers built for T = 8") {
  Backend& be = backend();
  const int64_t B = 2, T = 8, Ts = 3, C = 5;
  SUBCASE("linear") {
    Linear lin(Shape{T, C}, 4);
    ShorterView v(lin, Ts);
    check_ok(gradcheck_layer(v, to_device(be, random_uniform(6, B * Ts * C), Shape{B, Ts, C}),
                             options(kExact, 6)));
  }
  SUBCASE("layernorm") {
    LayerNorm ln(Shape{T, C});
    ShorterView v(ln, Ts);
    check_ok(gradcheck_layer(v, to_device(be, random_uniform(7, B * Ts * C), Shape{B, Ts, C}),
                             options(kSmooth, 7)));
  }
  SUBCASE("embedding (weight gradient only: ids are integers)") {
    Embedding e(Shape{T}, 6, C);
    ShorterView v(e, Ts);
    GradcheckOptions o = options(kExact, 8);
    o.check_input = false;
    check_ok(gradcheck_layer(v, to_device_i32(be, random_ids(8, B * Ts, 6), Shape{B, Ts}), o));
  }
  SUBCASE("softmax cross-entropy over (8, classes) fed (B, 3, classes)") {
    SoftmaxCrossEntropy loss(Shape{T, C});
    check_ok(gradcheck_loss(
        loss, to_device(be, random_uniform(9, B * Ts * C, -2.f, 2.f), Shape{B, Ts, C}),
        to_device_i32(be, random_ids(10, B * Ts, C), Shape{B, Ts}), B, options(kSmooth, 9)));
  }
}

// ---- the loss: the mean over the tokens present --------------------------------------------
TEST_CASE("cross-entropy at T' < T: the mean over the B * T' tokens, shares add up") {
  Backend& be = backend();
  const int64_t B = 4, T = 8, Ts = 3, V = 6;
  SoftmaxCrossEntropy loss(Shape{T, V});
  const auto z = random_uniform(11, B * Ts * V, -3.f, 3.f);
  const auto y = random_ids(12, B * Ts, V);
  // Reference in double: -log softmax(z)[y] averaged over B * T' tokens.
  double want = 0;
  for (int64_t r = 0; r < B * Ts; ++r) {
    const float* row = z.data() + r * V;
    const double mx = *std::max_element(row, row + V);
    double s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(static_cast<double>(row[v]) - mx);
    want += std::log(s) + mx - static_cast<double>(row[y[static_cast<size_t>(r)]]);
  }
  want /= static_cast<double>(B * Ts);
  const Tensor zt = to_device(be, z, Shape{B, Ts, V});
  const Tensor yt = to_device_i32(be, y, Shape{B, Ts});
  LayerContext ctx(be, check_step_info(), 1);
  CHECK(loss.forward(zt, yt, B, ctx) == doctest::Approx(want).epsilon(1e-6));
  // dlogits sum to zero per row and are (p - onehot) / (B T'): the onehot entry is -1/(B T') + p.
  const auto g = to_host(be, loss.backward(ctx));
  double total = 0;
  for (float v : g) total += v;
  CHECK(std::abs(total) < 1e-6);
  double grad_at_targets = 0;
  for (int64_t r = 0; r < B * Ts; ++r)
    grad_at_targets += g[static_cast<size_t>(r * V + y[static_cast<size_t>(r)])];
  double probs_at_targets = 0;  // sum of p at the targets over the tokens, from the reference
  for (int64_t r = 0; r < B * Ts; ++r) {
    const float* row = z.data() + r * V;
    double s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(static_cast<double>(row[v]));
    probs_at_targets += std::exp(static_cast<double>(row[y[static_cast<size_t>(r)]])) / s;
  }
  CHECK(grad_at_targets == doctest::Approx((probs_at_targets - static_cast<double>(B * Ts)) /
                                           static_cast<double>(B * Ts))
                               .epsilon(1e-5));

  // Two micro-batches of 2 (global batch 4): the shares add up to the full-batch mean.
  LayerContext c0(be, check_step_info(), 1), c1(be, check_step_info(), 1);
  const double s0 = loss.forward(zt.slice_rows(0, 2), yt.slice_rows(0, 2), B, c0);
  const double s1 = loss.forward(zt.slice_rows(2, 2), yt.slice_rows(2, 2), B, c1);
  CHECK(s0 + s1 == doctest::Approx(want).epsilon(1e-6));
}

TEST_CASE("cross-entropy: backward uses the T' of its own forward") {
  // A forward at another T' in between (an evaluation, say) must not change an earlier
  // forward's gradient scale.
  Backend& be = backend();
  SoftmaxCrossEntropy loss(Shape{8, 4});
  const Tensor z3 = to_device(be, random_uniform(13, 2 * 3 * 4), Shape{2, 3, 4});
  const Tensor y3 = to_device_i32(be, random_ids(14, 2 * 3, 4), Shape{2, 3});
  LayerContext a(be, check_step_info(), 1), b(be, check_step_info(), 1);
  loss.forward(z3, y3, 2, a);
  const auto want = to_host(be, loss.backward(a));
  LayerContext c(be, check_step_info(), 1);
  loss.forward(z3, y3, 2, c);
  loss.forward(to_device(be, random_uniform(15, 2 * 8 * 4), Shape{2, 8, 4}),
               to_device_i32(be, random_ids(16, 2 * 8, 4), Shape{2, 8}), 2, b);
  CHECK(to_host(be, loss.backward(c)) == want);
}

// ---- the gpt() model ----------------------------------------------------------------------
TEST_CASE("gpt() (context 8) runs on T' = 3 and T' = 8; logits of the first 3 positions agree") {
  Backend& be = backend();
  const int64_t vocab = 13, context = 8, d = 8, B = 2;
  Model m = gpt(vocab, context, d, /*n_layers=*/2, /*n_heads=*/2);
  std::vector<BoundParams> bound;
  for (int i = 0; i < m.num_layers(); ++i)
    bound.push_back(bind_random(m.layer(i), be, 20 + static_cast<uint64_t>(i), 0.5f, false));
  const auto ids8 = random_ids(30, B * context, vocab);
  const auto tg8 = random_ids(31, B * context, vocab);
  const ModelOutput o8 = run_model(m, to_device_i32(be, ids8, Shape{B, context}),
                                   to_device_i32(be, tg8, Shape{B, context}), B);
  const ModelOutput o3 =
      run_model(m, to_device_i32(be, first_ids(ids8, B, context, 3), Shape{B, 3}),
                to_device_i32(be, first_ids(tg8, B, context, 3), Shape{B, 3}), B);
  CHECK(o8.shape == Shape{B, context, vocab});
  CHECK(o3.shape == Shape{B, 3, vocab});
  CHECK(max_abs_diff(first_positions(o8.logits, B, context, vocab, 3), o3.logits) <= 1e-5);
  CHECK(std::isfinite(o3.loss));
  CHECK(o3.loss > 0);
}

TEST_CASE("gradcheck: gpt() (context 6) end to end at T' = 3, every parameter") {
  Backend& be = backend();
  const int64_t vocab = 5, context = 6, d = 8, B = 2, Ts = 3;
  Model m = gpt(vocab, context, d, /*n_layers=*/1, /*n_heads=*/2);
  std::vector<BoundParams> bound;
  for (int i = 0; i < m.num_layers(); ++i)
    bound.push_back(bind_random(m.layer(i), be, 40 + static_cast<uint64_t>(i), 0.5f, false));
  const Tensor ids = to_device_i32(be, random_ids(41, B * Ts, vocab), Shape{B, Ts});
  const Tensor tg = to_device_i32(be, random_ids(42, B * Ts, vocab), Shape{B, Ts});
  // Summed over tokens (share * B * T') so gradients are O(1) and the tolerances bite.
  const double scale = static_cast<double>(B * Ts);
  auto loss = [&] { return run_model(m, ids, tg, B).loss * scale; };
  {
    LayerContext root(be, check_step_info(), 5);
    Tensor h = ids;
    for (int i = 0; i < m.num_layers(); ++i)
      h = m.layer(i).forward(h, root.child(static_cast<size_t>(i)));
    LayerContext& lc = root.child(static_cast<size_t>(m.num_layers()));
    m.loss().forward(h, tg, B, lc);
    Tensor g = m.loss().backward(lc);
    for (int i = m.num_layers(); i-- > 0;) {
      LayerContext& c = root.child(static_cast<size_t>(i));
      const Tensor dx = m.layer(i).backward_input(g, c);
      m.layer(i).backward_weight(g, c);
      g = dx;
    }
  }
  const Tolerance tol = kSmooth;
  int64_t checked = 0, failures = 0;
  std::string text;
  for (int i = 0; i < m.num_layers(); ++i) {
    const auto specs = m.layer(i).param_specs();
    for (size_t k = 0; k < specs.size(); ++k) {
      const Tensor& p = bound[static_cast<size_t>(i)].params[k];
      const auto analytic = to_host(be, bound[static_cast<size_t>(i)].grads[k]);
      for (int64_t j = 0; j < p.numel(); ++j) {
        float* at = p.f32() + j;
        const float orig = *at;
        *at = orig + tol.eps;
        const double lp = loss();
        *at = orig - tol.eps;
        const double lm = loss();
        *at = orig;
        const double numeric = (lp - lm) / (2.0 * static_cast<double>(tol.eps));
        const double a = analytic[static_cast<size_t>(j)] * scale;
        ++checked;
        if (!(std::abs(a - numeric) <= tol.atol + tol.rtol * std::abs(numeric)) && failures++ < 8)
          text += m.layer(i).name() + "." + specs[k].name + "[" + std::to_string(j) +
                  "]: analytic " + std::to_string(a) + " numeric " + std::to_string(numeric) + "\n";
      }
    }
  }
  INFO(text);
  CHECK(checked == m.param_count());
  CHECK(failures == 0);
  // Positions >= T' of the position embedding got no gradient.
  const auto dpos = to_host(be, bound[1].grads[0]);
  CHECK(std::all_of(dpos.begin() + Ts * d, dpos.end(), [](float v) { return v == 0.f; }));
}

// ---- training: shapes change between steps -------------------------------------------------
TEST_CASE("Trainer steps on T' = 5 after T' = 8 (context 8), with 2 micro-batches") {
  auto be = make_cpu_backend(0, 1);
  const int64_t vocab = 17, context = 8, B = 4;
  Model m = gpt(vocab, context, 16, 2, 2);
  TrainerConfig cfg;
  cfg.microbatches = 2;
  cfg.seed = 3;
  cfg.optimizer.kind = "adamw";
  cfg.optimizer.lr = 1e-3f;
  cfg.lr = {LrSchedule::Kind::constant, 1e-3f, 0, 0, 0.f};
  Trainer trainer(m, *be, cfg);
  auto batch = [&](int64_t T, uint64_t seed) {
    std::vector<int32_t> x = random_ids(seed, B * T, vocab), y = random_ids(seed + 1, B * T, vocab);
    return std::pair{x, y};
  };
  auto [x8, y8] = batch(8, 50);
  auto [x5, y5] = batch(5, 60);
  const Tensor ix8 = Tensor::borrow(x8.data(), Shape{B, 8}, DType::i32);
  const Tensor iy8 = Tensor::borrow(y8.data(), Shape{B, 8}, DType::i32);
  const Tensor ix5 = Tensor::borrow(x5.data(), Shape{B, 5}, DType::i32);
  const Tensor iy5 = Tensor::borrow(y5.data(), Shape{B, 5}, DType::i32);
  const StepStats s8 = trainer.train_step(ix8, iy8);
  CHECK(std::isfinite(s8.loss));
  CHECK(!s8.skipped);
  // The training loss at T' = 5 is the evaluation loss of the same batch before the step.
  const EvalStats before = trainer.evaluate(ix5, iy5);
  const StepStats s5 = trainer.train_step(ix5, iy5);
  CHECK(!s5.skipped);
  CHECK(s5.grad_norm > 0);
  CHECK(s5.loss == doctest::Approx(before.loss).epsilon(1e-5));
  // Uniform guessing over 17 tokens: ln 17 ~ 2.83; a tiny model starts near it.
  CHECK(std::abs(before.loss - std::log(17.0)) < 0.5);
  // ...and back to T' = 8.
  CHECK(std::isfinite(trainer.train_step(ix8, iy8).loss));
}

// ---- errors --------------------------------------------------------------------------------
TEST_CASE("variable length: errors say what was expected, what came") {
  Backend& be = backend();
  LayerContext ctx(be, check_step_info(), 1);
  Linear lin(Shape{8, 5}, 4);
  lin.set_name("lm_head");
  bind_random(lin, be, 70);
  CHECK_THROWS_WITH_AS(
      lin.forward(to_device(be, random_uniform(71, 2 * 9 * 5), Shape{2, 9, 5}), ctx),
      "linear 'lm_head': expects input (B, T', 5) with 1 <= T' <= 8 (the sequence "
      "length it was built for) but got (2, 9, 5)",
      ShapeError);
  CHECK_THROWS_AS(lin.forward(be.zeros(Shape{2, 0, 5}), ctx), ShapeError);
  CHECK_THROWS_AS(lin.forward(be.zeros(Shape{2, 3, 6}), ctx), ShapeError);
  CHECK_THROWS_AS(lin.forward(be.zeros(Shape{6, 5}), ctx), ShapeError);
  lin.forward(be.zeros(Shape{2, 3, 5}), ctx);
  CHECK_THROWS_WITH_AS(lin.backward_weight(be.zeros(Shape{2, 4, 4}), ctx),
                       "linear 'lm_head': the gradient is (2, 4, 4) but forward ran on (2, 3, 5); "
                       "backward needs the gradient of that same forward",
                       ShapeError);

  LayerNorm ln(Shape{8, 5});
  bind_random(ln, be, 72);
  CHECK_THROWS_WITH_AS(ln.forward(be.zeros(Shape{1, 10, 5}), ctx),
                       "layernorm: expects input (B, T', 5) with 1 <= T' <= 8 (the sequence length "
                       "it was built for) but got (1, 10, 5)",
                       ShapeError);

  Embedding e(Shape{8}, 10, 4);
  bind_random(e, be, 73);
  CHECK_THROWS_WITH_AS(e.forward(be.zeros(Shape{2, 9}, DType::i32), ctx),
                       "embedding: expects input (B, T') with 1 <= T' <= 8 (the sequence length it "
                       "was built for) but got (2, 9)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(e.forward(be.zeros(Shape{2, 3}), ctx),
                       "embedding: expects input of type I32 but got F32", ShapeError);

  SoftmaxCrossEntropy loss(Shape{8, 4});
  CHECK_THROWS_WITH_AS(
      loss.forward(be.zeros(Shape{2, 9, 4}), be.zeros(Shape{2, 9}, DType::i32), 2, ctx),
      "softmax_cross_entropy: expects predictions (B, T', 4) with 1 <= T' <= 8 (the "
      "sequence length it was built for) but got (2, 9, 4)",
      ShapeError);
  CHECK_THROWS_WITH_AS(
      loss.forward(be.zeros(Shape{2, 3, 4}), be.zeros(Shape{2, 5}, DType::i32), 2, ctx),
      "softmax_cross_entropy: predictions (2, 3, 4) need targets (2, 3) but got (2, 5)",
      ShapeError);

  // Layers not built on a sequence keep the exact check and its message.
  Linear flat(Shape{6}, 4);
  bind_random(flat, be, 74);
  CHECK_THROWS_WITH_AS(flat.forward(be.zeros(Shape{5, 7}), ctx),
                       "linear: expects input (B, 6) but got (5, 7)", ShapeError);
}

TEST_CASE("gpt(): the token embedding starts normal(0, 0.02) like GPT-2") {
  Model m = gpt(11, 6, 8, 1, 2);
  const auto specs = m.layer(0).param_specs();
  REQUIRE(specs.size() == 1);
  CHECK(specs[0].init.kind == ParamInit::Kind::normal);
  CHECK(specs[0].init.a == 0.02f);
  CHECK(Embedding(Shape{4}, 10, 3).param_specs()[0].init.a == 1.f);  // PyTorch's default stays
}
