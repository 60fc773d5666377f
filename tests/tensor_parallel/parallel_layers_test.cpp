// Tensor-parallel layers against the layers as written: ColumnParallelLinear, RowParallelLinear,
// the attention split by heads and the transformer block, at T = 2 and 4 with the ranks as
// threads. Outputs and input gradients (whole on every rank) and the gathered parameter
// gradients must match the whole layer's within 2e-5 absolute on values of order one: the split
// changes the order of the sums (a row-parallel output is T partial dot products added, and the
// GEMMs block differently for other shapes), so bits differ; anything wrong in the split (a
// slice taken from the wrong rows, a sum skipped) moves results by O(0.1). Every rank must also
// hold the same bits of the whole tensors (the all-reduce hands every rank one sum).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/report/compare.h"
#include "layers/layers.h"
#include "layers/tensor_parallel/parallel_linear.h"
#include "layers/tensor_parallel/param_slices.h"
#include "layers/tensor_parallel/shard_model.h"
#include "layers/zoo.h"
#include "tests/tensor_parallel/ranks.h"

using namespace pt;
using namespace pt::test;

namespace {

constexpr double kTol = 2e-5;

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  return compare_tensors(a, b).max_abs;  // NaN on either side: +inf
}

Tensor device_tensor(Backend& be, const std::vector<float>& host, const Shape& s) {
  Tensor t = be.empty(s);
  be.copy_from_host(t.data(), host.data(), t.bytes());
  return t;
}

// Columns [first, first + n) of a (rows, cols) row-major matrix.
std::vector<float> columns(const std::vector<float>& m, int64_t cols, int64_t first, int64_t n) {
  std::vector<float> out;
  for (size_t r = 0; r < m.size() / static_cast<size_t>(cols); ++r)
    for (int64_t c = 0; c < n; ++c)
      out.push_back(m[r * static_cast<size_t>(cols) + static_cast<size_t>(first + c)]);
  return out;
}

// A group that passes every collective on except the all-reduces whose name contains `skip`:
// the layer then computes without that sum, as a bug would.
class SkippingGroup final : public TensorParallelGroup {
 public:
  SkippingGroup(TensorParallelGroup& inner, std::string skip)
      : inner_(&inner), skip_(std::move(skip)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void all_reduce_sum(Backend& be, float* data, int64_t n, std::string_view what) override {
    if (what.find(skip_) == std::string_view::npos) inner_->all_reduce_sum(be, data, n, what);
  }
  void all_gather(Backend& be, const float* in, float* out, int64_t n,
                  std::string_view what) override {
    inner_->all_gather(be, in, out, n, what);
  }
  void reduce_scatter_sum(Backend& be, const float* in, float* out, int64_t n,
                          std::string_view what) override {
    inner_->reduce_scatter_sum(be, in, out, n, what);
  }

 private:
  TensorParallelGroup* inner_;
  std::string skip_;
};

struct Compared {
  double y = 0, dx = 0, dw = 0;  // worst over ranks and parameters
  bool ranks_agree = true;       // every rank the same bits of y and dx
};

// Runs `whole` once and its shard on each of `ranks` (make_shard(tp) builds rank tp.rank's),
// with the same whole parameters, input and output gradient; compares. split_output: the
// shard's y and dy are its slice of the last dimension (a column-parallel layer);
// split_input: its x and dx are (a row-parallel one).
template <class MakeShard>
Compared compare_split(Layer& whole, const TpRanks& ranks, MakeShard make_shard, const Shape& xs,
                       bool split_input, bool split_output, const std::string& skip = "") {
  Backend& be0 = ranks.backend(0);
  const auto params = whole_params(whole, 11);
  const std::vector<float> x = uniform_values(21, xs.numel());
  const int64_t in = xs.back();
  const int64_t rows = xs.numel() / in;
  const int64_t out = whole.output_shape().back();
  const std::vector<float> dy = uniform_values(31, rows * out);
  const LayerRun ref = run_layer(whole, be0, params, device_tensor(be0, x, xs), dy);

  const int T = ranks.size();
  std::vector<std::unique_ptr<Layer>> shards(static_cast<size_t>(T));
  std::vector<std::unique_ptr<SkippingGroup>> skipping(static_cast<size_t>(T));
  std::vector<LayerRun> runs(static_cast<size_t>(T));
  ranks.run([&](int r) {
    TensorParallel tp = ranks.tp(r);
    if (!skip.empty()) {
      skipping[static_cast<size_t>(r)] = std::make_unique<SkippingGroup>(*tp.group, skip);
      tp.group = skipping[static_cast<size_t>(r)].get();
    }
    auto& shard = shards[static_cast<size_t>(r)];
    shard = make_shard(tp);
    Backend& be = ranks.backend(r);
    Shape sxs = xs;
    std::vector<float> sx = x;
    if (split_input) {
      sxs[sxs.rank() - 1] = in / T;
      sx = columns(x, in, r * (in / T), in / T);
    }
    const std::vector<float> sdy = split_output ? columns(dy, out, r * (out / T), out / T) : dy;
    runs[static_cast<size_t>(r)] = run_layer(*shard, be, params, device_tensor(be, sx, sxs), sdy);
  });
  Compared c;
  for (int r = 0; r < T; ++r) {
    const LayerRun& run = runs[static_cast<size_t>(r)];
    const auto y_ref = split_output ? columns(ref.y, out, r * (out / T), out / T) : ref.y;
    const auto dx_ref = split_input ? columns(ref.dx, in, r * (in / T), in / T) : ref.dx;
    c.y = std::max(c.y, max_diff(run.y, y_ref));
    c.dx = std::max(c.dx, max_diff(run.dx, dx_ref));
    if (!split_output && run.y != runs[0].y) c.ranks_agree = false;
    if (!split_input && run.dx != runs[0].dx) c.ranks_agree = false;
  }
  std::vector<const Layer*> layers;
  std::vector<Backend*> backends;
  for (int r = 0; r < T; ++r) {
    layers.push_back(shards[static_cast<size_t>(r)].get());
    backends.push_back(&ranks.backend(r));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<float> g_ref(static_cast<size_t>(whole.grads()[i].numel()));
    be0.copy_to_host(g_ref.data(), whole.grads()[i].data(), whole.grads()[i].bytes());
    c.dw = std::max(c.dw, max_diff(gather_whole(layers, i, backends), g_ref));
  }
  whole.unbind();
  for (auto& s : shards) s->unbind();
  return c;
}

void check_close(const Compared& c) {
  INFO("y ", c.y, " dx ", c.dx, " dW ", c.dw);
  CHECK(c.y <= kTol);
  CHECK(c.dx <= kTol);
  CHECK(c.dw <= kTol);
  CHECK(c.ranks_agree);
}

}  // namespace

TEST_CASE("column-parallel linear: each rank's output columns, the summed input gradient") {
  for (int T : {2, 4}) {
    CAPTURE(T);
    TpRanks ranks(T);
    Linear whole(Shape{5, 16}, 24);
    check_close(compare_split(
        whole, ranks,
        [](const TensorParallel& tp) {
          return std::make_unique<ColumnParallelLinear>(Shape{5, 16}, 24, true, tp);
        },
        Shape{3, 5, 16}, /*split_input=*/false, /*split_output=*/true));
  }
}

TEST_CASE("row-parallel linear: partial outputs summed, the bias added once") {
  for (int T : {2, 4}) {
    CAPTURE(T);
    TpRanks ranks(T);
    Linear whole(Shape{24}, 12);
    check_close(compare_split(
        whole, ranks,
        [T](const TensorParallel& tp) {
          return std::make_unique<RowParallelLinear>(Shape{24 / T}, 24, 12, true, tp);
        },
        Shape{7, 24}, /*split_input=*/true, /*split_output=*/false));
  }
}

TEST_CASE(
    "the row-parallel all-reduce and the input-gradient all-reduce are what make them match") {
  // The comparisons above fail when a sum is skipped: this test would pass if they did not.
  TpRanks ranks(2);
  Linear row_whole(Shape{24}, 12);
  const Compared no_output_sum = compare_split(
      row_whole, ranks,
      [](const TensorParallel& tp) {
        return std::make_unique<RowParallelLinear>(Shape{12}, 24, 12, true, tp);
      },
      Shape{7, 24}, true, false, /*skip=*/"row-parallel linear: output");
  CHECK(no_output_sum.y > 100 * kTol);
  Linear col_whole(Shape{16}, 24);
  const Compared no_input_sum = compare_split(
      col_whole, ranks,
      [](const TensorParallel& tp) {
        return std::make_unique<ColumnParallelLinear>(Shape{16}, 24, true, tp);
      },
      Shape{7, 16}, false, true, /*skip=*/"input gradient");
  CHECK(no_input_sum.dx > 100 * kTol);
  CHECK(no_input_sum.y <= kTol);  // forward needs no collective
}

TEST_CASE("attention split by heads: q, k, v rows of each rank's heads, projection summed") {
  for (int T : {2, 4}) {
    CAPTURE(T);
    TpRanks ranks(T);
    CausalSelfAttention whole(32, 4, 6, 0.02f);
    check_close(compare_split(
        whole, ranks,
        [](const TensorParallel& tp) {
          return std::make_unique<CausalSelfAttention>(32, 4, 6, 0.02f, tp);
        },
        Shape{2, 6, 32}, false, false));
  }
  TpRanks ranks(2);
  CausalSelfAttention whole(32, 4, 6, 0.02f);
  const Compared skipped = compare_split(
      whole, ranks,
      [](const TensorParallel& tp) {
        return std::make_unique<CausalSelfAttention>(32, 4, 6, 0.02f, tp);
      },
      Shape{2, 6, 32}, false, false, /*skip=*/"attention: output projection");
  CHECK(skipped.y > 100 * kTol);
}

TEST_CASE("transformer block: two all-reduces forward, two backward, whole residual stream") {
  for (int T : {2, 4}) {
    CAPTURE(T);
    TpRanks ranks(T);
    TransformerBlock whole(32, 4, 6, 4, 0.02f);
    check_close(compare_split(
        whole, ranks,
        [](const TensorParallel& tp) {
          return TransformerBlock(32, 4, 6, 4, 0.02f).shard_for(tp, ActivationSplit{});
        },
        Shape{2, 5, 32}, false, false));  // 5 < context 6: shorter sequences too
  }
}

TEST_CASE("param slices: take and put are inverse, q/k/v blocks split by heads") {
  // Whole (6, 2) as 3 groups of 2 rows; rank 1 of 2 holds rows 1, 3, 5.
  std::vector<float> whole(12);
  for (size_t i = 0; i < whole.size(); ++i) whole[i] = static_cast<float>(i);
  const ParamShard shard{0, 1, 2, 3, Shape{6, 2}};
  CHECK(slice_shape(Shape{6, 2}, shard) == Shape{3, 2});
  std::vector<float> slice(6);
  take_slice(whole, shard, slice);
  CHECK(slice == std::vector<float>{2, 3, 6, 7, 10, 11});
  std::vector<float> back(12, -1.f);
  put_slice(slice, shard, back);
  CHECK(back == std::vector<float>{-1, -1, 2, 3, -1, -1, 6, 7, -1, -1, 10, 11});
  // Columns: rank 0 of 2 of (2, 4) split on dim 1 holds columns 0, 1.
  const ParamShard cols{1, 0, 2, 1, Shape{2, 4}};
  std::vector<float> c(4);
  take_slice(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}, cols, c);
  CHECK(c == std::vector<float>{0, 1, 4, 5});
  CHECK_THROWS_AS(slice_shape(Shape{5, 2}, ParamShard{0, 0, 2, 1, Shape{5, 2}}), ShapeError);
}

TEST_CASE("shard_model: the declared split of the zoo's models, and clear refusals") {
  TpRanks ranks(2);
  const TensorParallel tp = ranks.tp(1);
  std::vector<std::string> replicated;
  const Model mlp = shard_model(fashion_mlp(), tp, &replicated);
  // flatten, (linear, relu) x 4, linear: the hidden linears pair; the head stays whole.
  CHECK(mlp.layer(1).output_shape() == Shape{512});
  CHECK(mlp.layer(2).output_shape() == Shape{512});  // relu on the slice
  CHECK(mlp.layer(3).input_shape() == Shape{512});
  CHECK(mlp.layer(3).output_shape() == Shape{1024});
  CHECK(mlp.layer(1).param_specs()[0].shape == Shape{512, 784});
  CHECK(mlp.layer(3).param_specs()[0].shape == Shape{1024, 512});
  CHECK(replicated == std::vector<std::string>{"9 'linear'"});
  CHECK(mlp.signature() == fashion_mlp().signature());
  CHECK(mlp.tensor_parallel().size == 2);

  // Heads that do not split.
  CHECK_THROWS_WITH_AS(shard_model(gpt(64, 8, 24, 1, 3), tp), doctest::Contains("n_heads (3)"),
                       ShapeError);
  // A column-parallel linear left open before the head.
  Model open =
      ModelBuilder({8}).linear(16).parallel(ParallelStyle::column).relu().linear(4).mse().build();
  CHECK_THROWS_WITH_AS(shard_model(std::move(open), tp), doctest::Contains("row-parallel"),
                       ShapeError);
  // A row-parallel linear with nothing split before it.
  Model row_first = ModelBuilder({8}).linear(16).parallel(ParallelStyle::row).mse().build();
  CHECK_THROWS_WITH_AS(shard_model(std::move(row_first), tp),
                       doctest::Contains("follows a column-parallel one"), ShapeError);
  // T = 1: the model as written.
  const Model same = shard_model(fashion_mlp(), TensorParallel{});
  CHECK(same.layer(1).param_specs()[0].shape == Shape{1024, 784});
}
