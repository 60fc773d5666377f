// The vocab-parallel embedding and cross-entropy (layers/tensor_parallel/vocab_parallel_*.h)
// against Embedding and SoftmaxCrossEntropy on the whole table and the whole logits, at T = 2
// and 4 with the ranks as threads.
//
// Embedding: bit for bit. Each element of the forward is one rank's row plus T - 1 zeros (an
// exact sum), and each rank adds its ids' gradient rows in position order as the whole layer
// does (two micro-batches: the gradients accumulate).
// Cross-entropy: the loss within 1e-6 relative, dlogits within 1e-6 absolute, not bit for bit:
// the row's sum of exp(z - max) is T slice sums rescaled by exp(m_t - M) and added in double,
// and the probabilities divide by that S, so the roundings differ by a few ulp. A collective
// left out moves results by O(0.1) (a label on another rank's classes read as a logit of 0,
// the other slices' exponentials missing): the "local only" group below shows the comparisons
// catch that. Every rank must return the same loss bits, and nothing may be NaN or infinite.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "layers/embedding.h"
#include "layers/losses.h"
#include "layers/tensor_parallel/vocab_parallel_cross_entropy.h"
#include "tests/tensor_parallel/ranks.h"

using namespace pt;
using namespace pt::test;

namespace {

constexpr double kLossRtol = 1e-6;
constexpr double kGradAtol = 1e-6;
const float kInf = std::numeric_limits<float>::infinity();

Tensor device_floats(Backend& be, const std::vector<float>& host, const Shape& s) {
  Tensor t = be.empty(s);
  be.copy_from_host(t.data(), host.data(), t.bytes());
  return t;
}

Tensor device_ints(Backend& be, const std::vector<int32_t>& host, const Shape& s) {
  Tensor t = be.empty(s, DType::i32);
  be.copy_from_host(t.data(), host.data(), t.bytes());
  return t;
}

std::vector<float> to_host(Backend& be, const Tensor& t) {
  std::vector<float> host(static_cast<size_t>(t.numel()));
  be.synchronize();
  be.copy_to_host(host.data(), t.data(), t.bytes());
  return host;
}

bool finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    if (d > worst) worst = d;
  }
  return worst;
}

// A group that never talks to the other ranks: all_reduce_sum keeps the rank's own part and
// all_gather puts the rank's own block in every slot. What a layer computes with it is what it
// would compute with its collective left out.
class LocalOnlyGroup final : public TensorParallelGroup {
 public:
  LocalOnlyGroup(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(Backend&, float*, int64_t, std::string_view) override {}
  void all_gather(Backend& be, const float* in, float* out, int64_t n, std::string_view) override {
    for (int r = 0; r < size_; ++r)
      be.copy_within(out + r * n, in, static_cast<size_t>(n) * sizeof(float));
  }
  void reduce_scatter_sum(Backend& be, const float* in, float* out, int64_t n,
                          std::string_view) override {
    be.copy_within(out, in + rank_ * n, static_cast<size_t>(n) * sizeof(float));
  }

 private:
  int rank_, size_;
};

// The message of the ShapeError `f` throws ("" and a failed check when it throws none).
template <class F>
std::string shape_error_of(F f) {
  try {
    f();
  } catch (const ShapeError& e) {
    return e.what();
  }
  FAIL_CHECK("no ShapeError");
  return "";
}

// ---- embedding ------------------------------------------------------------------------------

constexpr int64_t kVocab = 12, kDim = 5, kSeq = 6;  // 12 rows: 6 per rank at T = 2, 3 at T = 4
const Shape kIds{3, 4};                             // B = 3, T' = 4 < kSeq: a shorter sequence

// Two micro-batches of ids: together every row of the table, each rank's, with repeats.
const std::vector<std::vector<int32_t>> kMicroBatchIds = {
    {0, 1, 2, 3, 11, 10, 9, 8, 5, 6, 0, 11},
    {4, 4, 7, 7, 2, 9, 3, 10, 1, 1, 8, 6},
};

struct EmbeddingRun {
  std::vector<std::vector<float>> y;  // per micro-batch
  bool input_gradient = false;        // whether backward_input returned a tensor
  BoundSlices bound;
};

// Forward, backward_input and backward_weight for each micro-batch (the gradients accumulate).
EmbeddingRun run_embedding(Layer& layer, Backend& be,
                           const std::vector<std::vector<float>>& params) {
  EmbeddingRun run;
  run.bound = bind_slices(layer, be, params);
  for (size_t m = 0; m < kMicroBatchIds.size(); ++m) {
    const StepInfo info{/*seed=*/7, /*step=*/0, /*microbatch=*/static_cast<int>(m), true};
    LayerContext ctx(be, info, /*key=*/1);
    const Tensor y = layer.forward(device_ints(be, kMicroBatchIds[m], kIds), ctx);
    run.y.push_back(to_host(be, y));
    const Tensor dy = device_floats(be, uniform_values(40 + m, y.numel()), y.shape());
    run.input_gradient = run.input_gradient || layer.backward_input(dy, ctx).defined();
    layer.backward_weight(dy, ctx);
  }
  be.synchronize();
  return run;
}

void check_embedding(int T) {
  TpRanks ranks(T);
  Embedding whole(Shape{kSeq}, kVocab, kDim, ParamInit::normal(0.02f));
  whole.set_name("wte");
  whole.set_parallel_style(ParallelStyle::vocab);
  const auto params = whole_params(whole, 3);
  Backend& be0 = ranks.backend(0);
  const EmbeddingRun ref = run_embedding(whole, be0, params);
  const std::vector<float> ref_grad = to_host(be0, whole.grads()[0]);

  std::vector<std::unique_ptr<Layer>> shards(static_cast<size_t>(T));
  std::vector<EmbeddingRun> runs(static_cast<size_t>(T));
  ranks.run([&](int r) {
    auto& shard = shards[static_cast<size_t>(r)];
    shard = whole.shard_for(ranks.tp(r), ActivationSplit{});
    if (!shard) return;
    runs[static_cast<size_t>(r)] = run_embedding(*shard, ranks.backend(r), params);
  });

  std::vector<const Layer*> layers;
  std::vector<Backend*> backends;
  for (int r = 0; r < T; ++r) {
    CAPTURE(r);
    const Layer* shard = shards[static_cast<size_t>(r)].get();
    REQUIRE(shard != nullptr);
    CHECK(dynamic_cast<const Embedding*>(shard)->rows().count == kVocab / T);
    CHECK(shard->kind() == "embedding");
    CHECK(shard->name() == "wte");
    CHECK(shard->output_split({}).whole());
    const auto specs = shard->param_specs();
    REQUIRE(specs.size() == 1);
    CHECK(specs[0].name == "weight");
    CHECK(specs[0].shape == Shape{kVocab / T, kDim});
    CHECK(specs[0].shard.dim == 0);
    CHECK(specs[0].shard.rank == r);
    CHECK(specs[0].shard.ranks == T);
    CHECK(specs[0].shard.whole == Shape{kVocab, kDim});
    CHECK(specs[0].init.kind == ParamInit::Kind::normal);
    CHECK(specs[0].init.a == 0.02f);
    const EmbeddingRun& run = runs[static_cast<size_t>(r)];
    CHECK_FALSE(run.input_gradient);
    for (size_t m = 0; m < kMicroBatchIds.size(); ++m) {
      CAPTURE(m);
      CHECK(finite(run.y[m]));
      CHECK(same_bits(run.y[m], ref.y[m]));  // every rank: the whole activation
    }
    layers.push_back(shard);
    backends.push_back(&ranks.backend(r));
  }
  const std::vector<float> grad = gather_whole(layers, 0, backends);
  CHECK(finite(grad));
  CHECK(same_bits(grad, ref_grad));
  CHECK(finite(ref_grad));
}

// ---- cross-entropy --------------------------------------------------------------------------

struct LossData {
  Shape in;                   // whole per-sample prediction shape
  Shape logits_shape;         // whole (B, C) or (B, T', C)
  std::vector<float> logits;  // whole
  std::vector<int32_t> labels;
  Shape labels_shape;
  int64_t global_batch = 0;
  int64_t classes() const { return in.back(); }
  int64_t rows() const { return static_cast<int64_t>(labels.size()); }
};

// Random logits in [-3, 3) and labels on every rank's classes in turn, with rows that test
// what the split can get wrong:
//   row 0: the maximum on the last rank's classes, the label on rank 0's;
//   row 1: equal maxima on rank 0's and rank 1's classes, the label the lower one (correct only
//          if ties go to the lowest class across ranks);
//   row 2: the label the maximum, on the last rank's classes (correct);
//   row 3: every logit of rank 0's classes -inf (its slice has no number), the label on rank 1.
LossData loss_data(int T, Shape in, Shape logits_shape, Shape labels_shape, uint64_t seed) {
  LossData d;
  d.in = in;
  d.logits_shape = logits_shape;
  d.labels_shape = labels_shape;
  const int64_t C = in.back(), per = C / T, rows = labels_shape.numel();
  d.global_batch = 2 * logits_shape[0];  // another micro-batch's share is elsewhere
  d.logits = uniform_values(seed, rows * C, -3.f, 3.f);
  for (int64_t i = 0; i < rows; ++i)
    d.labels.push_back(static_cast<int32_t>((i % T) * per + (i / T) % per));
  auto z = [&](int64_t row, int64_t c) -> float& {
    return d.logits[static_cast<size_t>(row * C + c)];
  };
  REQUIRE(rows >= 4);
  z(0, C - 1) = 8.f;
  d.labels[0] = 1;
  z(1, 2) = 9.f;
  z(1, per + 1) = 9.f;
  d.labels[1] = 2;
  z(2, C - 2) = 7.f;
  d.labels[2] = static_cast<int32_t>(C - 2);
  for (int64_t c = 0; c < per; ++c) z(3, c) = -kInf;
  d.labels[3] = static_cast<int32_t>(per);
  return d;
}

// Columns [first, first + n) of every row of a (rows, cols) row-major matrix.
std::vector<float> columns(const std::vector<float>& m, int64_t cols, int64_t first, int64_t n) {
  std::vector<float> out;
  const int64_t rows = static_cast<int64_t>(m.size()) / cols;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) out.push_back(m[static_cast<size_t>(r * cols + first + c)]);
  return out;
}

struct LossRun {
  double loss = 0;
  std::vector<float> dlogits;
  int64_t correct = 0;
  Loss::Counted counted;  // forward_counting on the same micro-batch (one all-gather)
};

LossRun run_loss(Loss& loss, Backend& be, const LossData& d, const Shape& logits_shape,
                 const std::vector<float>& logits) {
  const StepInfo info{/*seed=*/7, /*step=*/0, /*microbatch=*/0, /*training=*/true};
  LayerContext ctx(be, info, /*key=*/1);
  const Tensor z = device_floats(be, logits, logits_shape);
  const Tensor y = device_ints(be, d.labels, d.labels_shape);
  LossRun run;
  run.loss = loss.forward(z, y, d.global_batch, ctx);
  run.dlogits = to_host(be, loss.backward(ctx));
  run.correct = loss.count_correct(z, y, be);
  LayerContext again(be, info, /*key=*/1);
  run.counted = loss.forward_counting(z, y, d.global_batch, again);
  return run;
}

// Rank r's slice of the logits (the last dimension).
Shape slice_shape_of(const Shape& whole, int T) {
  Shape s = whole;
  s[s.rank() - 1] /= T;
  return s;
}

// Every rank's loss against SoftmaxCrossEntropy's on the whole logits; `local_only` runs the
// shards with LocalOnlyGroup instead (returns the largest relative loss error over the ranks).
double check_loss(int T, const LossData& d, bool local_only = false) {
  TpRanks ranks(T);
  SoftmaxCrossEntropy whole(d.in);
  const LossRun ref = run_loss(whole, ranks.backend(0), d, d.logits_shape, d.logits);
  REQUIRE(std::isfinite(ref.loss));
  REQUIRE(finite(ref.dlogits));
  REQUIRE(ref.correct >= 2);  // rows 1 and 2 at least: count_correct is tested for real

  const int64_t C = d.classes(), per = C / T;
  const Shape slice = slice_shape_of(d.logits_shape, T);
  std::vector<LossRun> runs(static_cast<size_t>(T));
  std::vector<std::string> kinds(static_cast<size_t>(T));
  ranks.run([&](int r) {
    TensorParallel tp = ranks.tp(r);
    LocalOnlyGroup local(r, T);
    if (local_only) tp.group = &local;
    std::unique_ptr<Loss> shard = whole.shard_for(tp, ActivationSplit{.features = true});
    if (!shard) return;
    kinds[static_cast<size_t>(r)] = std::string(shard->kind());
    shard->check_input(slice_shape_of(d.in, T));
    runs[static_cast<size_t>(r)] =
        run_loss(*shard, ranks.backend(r), d, slice, columns(d.logits, C, r * per, per));
  });

  double worst = 0;
  std::vector<float> dlogits(d.logits.size(), std::numeric_limits<float>::quiet_NaN());
  for (int r = 0; r < T; ++r) {
    CAPTURE(r);
    const LossRun& run = runs[static_cast<size_t>(r)];
    const double rel = std::abs(run.loss - ref.loss) / std::abs(ref.loss);
    worst = std::max(worst, std::isnan(rel) ? kInf : rel);
    if (local_only) continue;  // wrong by construction: only its distance from ref counts
    CHECK(kinds[static_cast<size_t>(r)] == "softmax_cross_entropy");
    CHECK(std::isfinite(run.loss));
    CHECK(finite(run.dlogits));
    CHECK(std::memcmp(&run.loss, &runs[0].loss, sizeof(double)) == 0);  // the same bits
    INFO("loss: rank " << r << " " << run.loss << ", whole " << ref.loss);
    CHECK(rel <= kLossRtol);
    CHECK(run.correct == ref.correct);
    // What a training step asks for: the same loss bits and count from one pass.
    CHECK(std::memcmp(&run.counted.loss, &run.loss, sizeof(double)) == 0);
    CHECK(run.counted.correct == ref.correct);
    for (int64_t row = 0; row < d.rows(); ++row)
      for (int64_t c = 0; c < per; ++c)
        dlogits[static_cast<size_t>(row * C + r * per + c)] =
            run.dlogits[static_cast<size_t>(row * per + c)];
  }
  if (!local_only) {
    CHECK(finite(dlogits));
    const double grad_diff = max_abs_diff(dlogits, ref.dlogits);
    // For calibration, as tests/gpu/ops_test.cpp prints its largest errors.
    MESSAGE("T = " << T << ", logits " << d.logits_shape.str() << ": loss relative error " << worst
                   << ", largest |dlogits - whole| " << grad_diff);
    CHECK(grad_diff <= kGradAtol);
  }
  return worst;
}

LossData rows_case(int T) { return loss_data(T, Shape{16}, Shape{7, 16}, Shape{7}, 11); }
// Built for T = 4 tokens, run on T' = 3.
LossData sequence_case(int T) {
  return loss_data(T, Shape{4, 16}, Shape{2, 3, 16}, Shape{2, 3}, 12);
}

}  // namespace

// Run alone with -ts='*vocab*'.
TEST_SUITE_BEGIN("vocab parallel");

TEST_CASE("vocab-parallel embedding: Embedding's forward and gradient, bit for bit") {
  for (int T : {2, 4}) {
    CAPTURE(T);
    check_embedding(T);
  }
}

TEST_CASE("vocab-parallel cross-entropy equals SoftmaxCrossEntropy on (B, C)") {
  for (int T : {2, 4}) {
    CAPTURE(T);
    check_loss(T, rows_case(T));
  }
}

TEST_CASE("vocab-parallel cross-entropy equals SoftmaxCrossEntropy on (B, T', C)") {
  for (int T : {2, 4}) {
    CAPTURE(T);
    check_loss(T, sequence_case(T));
  }
}

// Every label on the last rank's classes: rank 0 sees none of them, and gets the whole loss only
// through the all-gather. With the collectives left out (LocalOnlyGroup) the same comparisons
// fail by far more than their tolerances: they test the collectives.
TEST_CASE("vocab-parallel: the collectives carry what a rank does not hold") {
  for (int T : {2, 4}) {
    CAPTURE(T);
    LossData d = rows_case(T);
    const int64_t per = d.classes() / T;
    for (size_t i = 0; i < d.labels.size(); ++i)
      d.labels[i] = static_cast<int32_t>((T - 1) * per + static_cast<int64_t>(i) % per);
    d.labels[0] = static_cast<int32_t>(d.classes() - 1);  // row 0's maximum: correct
    d.labels[2] = static_cast<int32_t>(d.classes() - 2);  // row 2's maximum: correct
    CHECK(check_loss(T, d) <= kLossRtol);
    CHECK(check_loss(T, d, /*local_only=*/true) > 0.1);
  }

  // The embedding without its all-reduce: each rank holds zeros for the others' ids.
  TpRanks ranks(2);
  Embedding whole(Shape{kSeq}, kVocab, kDim);
  whole.set_parallel_style(ParallelStyle::vocab);
  const auto params = whole_params(whole, 3);
  const EmbeddingRun ref = run_embedding(whole, ranks.backend(0), params);
  std::vector<EmbeddingRun> runs(2);
  std::vector<std::unique_ptr<Layer>> shards(2);
  ranks.run([&](int r) {
    LocalOnlyGroup local(r, 2);
    TensorParallel tp = ranks.tp(r);
    tp.group = &local;
    shards[static_cast<size_t>(r)] = whole.shard_for(tp, ActivationSplit{});
    runs[static_cast<size_t>(r)] =
        run_embedding(*shards[static_cast<size_t>(r)], ranks.backend(r), params);
  });
  for (int r = 0; r < 2; ++r)
    CHECK(max_abs_diff(runs[static_cast<size_t>(r)].y[0], ref.y[0]) > 0.1);
}

TEST_CASE("vocab-parallel: sizes that do not split, ids never split, one rank stays whole") {
  TpRanks ranks(4);
  Embedding odd(Shape{kSeq}, 10, kDim);
  odd.set_name("wte");
  odd.set_parallel_style(ParallelStyle::vocab);
  const std::string e =
      shape_error_of([&] { (void)odd.shard_for(ranks.tp(1), ActivationSplit{}); });
  INFO(e);
  CHECK(e.find("10") != std::string::npos);
  CHECK(e.find("4") != std::string::npos);
  CHECK(e.find("'wte'") != std::string::npos);
  CHECK(e.find("pad the vocabulary to a multiple of 4") != std::string::npos);

  const std::string l = shape_error_of([&] {
    (void)SoftmaxCrossEntropy(Shape{3, 10})
        .shard_for(ranks.tp(1), ActivationSplit{.features = true});
  });
  INFO(l);
  CHECK(l.find("10") != std::string::npos);
  CHECK(l.find("4") != std::string::npos);
  CHECK(l.find("pad the vocabulary") != std::string::npos);

  Embedding even(Shape{kSeq}, kVocab, kDim);
  even.set_parallel_style(ParallelStyle::vocab);
  CHECK(shape_error_of([&] {
          (void)even.shard_for(ranks.tp(0), ActivationSplit{.features = true});
        }).find("token ids") != std::string::npos);
  CHECK(even.shard_for(TensorParallel{}, ActivationSplit{}).get() ==
        nullptr);  // one rank: the layer as written
  Embedding replicated(Shape{kSeq}, kVocab, kDim);
  CHECK(replicated.shard_for(ranks.tp(0), ActivationSplit{}).get() == nullptr);

  SoftmaxCrossEntropy loss(Shape{16});
  CHECK(loss.shard_for(ranks.tp(0), ActivationSplit{}).get() == nullptr);
  CHECK(loss.shard_for(TensorParallel{}, ActivationSplit{.features = true}).get() == nullptr);

  // The loss checks the slice it is given.
  const auto shard = loss.shard_for(ranks.tp(2), ActivationSplit{.features = true});
  REQUIRE(shard != nullptr);
  CHECK_NOTHROW(shard->check_input(Shape{4}));
  CHECK_THROWS_AS(shard->check_input(Shape{16}), ShapeError);
}

// Every rank checks the same labels (ids) before its collective, so a bad batch is refused on
// all of them and no rank is left waiting in the all-gather (all-reduce).
TEST_CASE("vocab-parallel: a bad label or id is refused on every rank") {
  TpRanks ranks(2, /*timeout_s=*/5);
  std::vector<std::string> outcome(2);
  const LossData d = rows_case(2);
  SoftmaxCrossEntropy whole(d.in);
  Embedding table(Shape{kSeq}, kVocab, kDim);
  table.set_parallel_style(ParallelStyle::vocab);
  const auto params = whole_params(table, 3);
  for (int which = 0; which < 2; ++which) {
    CAPTURE(which);
    ranks.run([&](int r) {
      Backend& be = ranks.backend(r);
      const StepInfo info{};
      LayerContext ctx(be, info, 1);
      try {
        if (which == 0) {
          std::vector<int32_t> labels = d.labels;
          labels[3] = static_cast<int32_t>(d.classes());  // one past the last class
          const auto shard = whole.shard_for(ranks.tp(r), ActivationSplit{.features = true});
          (void)shard->forward(device_floats(be, columns(d.logits, 16, r * 8, 8), Shape{7, 8}),
                               device_ints(be, labels, d.labels_shape), d.global_batch, ctx);
        } else {
          std::vector<int32_t> ids = kMicroBatchIds[0];
          ids[5] = -1;
          const auto shard = table.shard_for(ranks.tp(r), ActivationSplit{});
          const BoundSlices bound = bind_slices(*shard, be, params);
          (void)shard->forward(device_ints(be, ids, kIds), ctx);
        }
        outcome[static_cast<size_t>(r)] = "accepted";
      } catch (const UsageError&) {
        outcome[static_cast<size_t>(r)] = "usage error";
      } catch (const std::exception& e) {
        outcome[static_cast<size_t>(r)] = e.what();
      }
    });
    CHECK(outcome[0] == "usage error");
    CHECK(outcome[1] == "usage error");
  }
}

TEST_SUITE_END();
