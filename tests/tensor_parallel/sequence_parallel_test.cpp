// Sequence parallelism (Korthikanti et al. 2022) against plain tensor parallelism, with the
// ranks as threads: a transformer block (taking its chunk of a whole input, or continuing on a
// chunk), the whole GPT through shard_model (one micro-batch forward and backward, layer by
// layer), and training (20 steps against plain TP, and against single-device training in
// training_test.cpp).
//
// Bits: the reduce-scatters sum each element in rank order, as the all-reduce does, and every
// GEMM sees the gathered sequence, the same operands as without sequence parallelism, so
// activations, input gradients and the linear layers' parameter gradients are bit-identical to
// plain TP. The exception is the LayerNorms' weight and bias gradients: each rank sums its chunk
// of the tokens and the ranks' sums are then added (layernorm.h), another order than one sum
// over all tokens; they match to rounding (bound 1e-6 absolute on gradients of order 1..10,
// measured below), and training, where such differences compound, to training_test's bounds.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/random.h"
#include "engine/replicas/data_parallel_trainer.h"
#include "engine/report/compare.h"
#include "layers/layers.h"
#include "layers/tensor_parallel/param_slices.h"
#include "layers/tensor_parallel/shard_model.h"
#include "layers/zoo.h"
#include "tests/pipeline/pipeline_test_util.h"
#include "tests/tensor_parallel/ranks.h"

using namespace pt;
using namespace pt::test;

namespace {

// LayerNorm parameter gradients: the largest difference relative to the largest magnitude of
// the tensor (sums of 8..24 products of values of order 1 here: gradients of order 1..10).
constexpr double kLayerNormTolerance = 1e-6;

double relative_diff(const std::vector<float>& got, const std::vector<float>& want) {
  double scale = 0;
  for (float v : want) scale = std::max(scale, static_cast<double>(std::abs(v)));
  return compare_tensors(got, want).max_abs / std::max(scale, 1e-30);
}

Tensor device_tensor(Backend& be, const std::vector<float>& host, const Shape& s) {
  Tensor t = be.empty(s);
  be.copy_from_host(t.data(), host.data(), t.bytes());
  return t;
}

// Rank t's chunk of a (B, Tp, token) host tensor split in T along the sequence.
std::vector<float> chunk(const std::vector<float>& whole, int64_t B, int64_t Tp, int64_t token,
                         int t, int T) {
  const int64_t c = Tp / T;
  std::vector<float> out;
  for (int64_t b = 0; b < B; ++b) {
    const auto first = whole.begin() + (b * Tp + t * c) * token;
    out.insert(out.end(), first, first + c * token);
  }
  return out;
}

bool is_layernorm(const std::string& param) {
  return param.rfind("ln", 0) == 0 || param.find(".ln") != std::string::npos;
}

// ---- one transformer block ------------------------------------------------------------------
struct BlockRuns {
  std::vector<LayerRun> runs;
  std::vector<std::unique_ptr<Layer>> shards;
};

// Runs `whole` sharded as make(rank) on every rank with the whole parameters `params`; x and dy
// per rank.
template <class Make>
BlockRuns run_block(const TpRanks& ranks, Make make, const std::vector<std::vector<float>>& params,
                    const std::function<Tensor(int rank, Backend&)>& x,
                    const std::function<std::vector<float>(int rank)>& dy) {
  BlockRuns out;
  out.runs.resize(static_cast<size_t>(ranks.size()));
  out.shards.resize(static_cast<size_t>(ranks.size()));
  ranks.run([&](int r) {
    auto& shard = out.shards[static_cast<size_t>(r)];
    shard = make(r);
    Backend& be = ranks.backend(r);
    out.runs[static_cast<size_t>(r)] = run_layer(*shard, be, params, x(r, be), dy(r));
  });
  return out;
}

// The whole gradient of each parameter, gathered from the ranks' slices.
std::vector<std::vector<float>> whole_grads(const TpRanks& ranks, const BlockRuns& b) {
  std::vector<const Layer*> layers;
  std::vector<Backend*> backends;
  for (int r = 0; r < ranks.size(); ++r) {
    layers.push_back(b.shards[static_cast<size_t>(r)].get());
    backends.push_back(&ranks.backend(r));
  }
  std::vector<std::vector<float>> g;
  for (size_t i = 0; i < layers[0]->param_specs().size(); ++i)
    g.push_back(gather_whole(layers, i, backends));
  return g;
}

// Every rank holds the same bits of each replicated parameter's gradient.
bool replicated_grads_agree(const TpRanks& ranks, const BlockRuns& b) {
  const auto specs = b.shards[0]->param_specs();
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].shard.split()) continue;
    std::vector<float> first;
    for (int r = 0; r < ranks.size(); ++r) {
      const Tensor& g = b.shards[static_cast<size_t>(r)]->grads()[i];
      std::vector<float> h(static_cast<size_t>(g.numel()));
      ranks.backend(r).copy_to_host(h.data(), g.data(), g.bytes());
      if (r == 0)
        first = h;
      else if (h != first)
        return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("sequence parallelism: a transformer block is plain tensor parallelism on chunks") {
  constexpr int64_t d = 32, H = 4, context = 8;
  TransformerBlock whole(d, H, context, 4, 0.02f);
  const auto params = whole_params(whole, 11);
  struct Case {
    int T;
    int64_t B, Tp;  // Tp: this micro-batch's sequence length T' (<= context)
  };
  for (const Case c : {Case{2, 2, 8}, Case{2, 1, 8}, Case{2, 3, 6}, Case{4, 2, 8}, Case{4, 2, 4}}) {
    CAPTURE(c.T);
    CAPTURE(c.B);
    CAPTURE(c.Tp);
    TpRanks ranks(c.T);
    const Shape xs{c.B, c.Tp, d};
    const Shape cs{c.B, c.Tp / c.T, d};
    const std::vector<float> x = uniform_values(21, xs.numel());
    const std::vector<float> dy = uniform_values(31, xs.numel());
    const auto part = [&](const std::vector<float>& v, int r) {
      return chunk(v, c.B, c.Tp, d, r, c.T);
    };

    const BlockRuns plain = run_block(
        ranks, [&](int r) { return whole.shard_for(ranks.tp(r), ActivationSplit{}); }, params,
        [&](int, Backend& be) { return device_tensor(be, x, xs); }, [&](int) { return dy; });
    // The first block: a whole input, of which it takes its chunk.
    const BlockRuns first = run_block(
        ranks, [&](int r) { return whole.shard_for(ranks.tp(r, true), ActivationSplit{}); }, params,
        [&](int, Backend& be) { return device_tensor(be, x, xs); },
        [&](int r) { return part(dy, r); });
    // A later block: its input is the previous block's chunk.
    const BlockRuns later = run_block(
        ranks,
        [&](int r) {
          return whole.shard_for(ranks.tp(r, true),
                                 ActivationSplit{.features = false, .sequence = true});
        },
        params, [&](int r, Backend& be) { return device_tensor(be, part(x, r), cs); },
        [&](int r) { return part(dy, r); });

    // The block as written, on one device: what its activations cost without any split.
    TpRanks one_rank(1);
    const BlockRuns alone = run_block(
        one_rank, [&](int) { return whole.shard_for(TensorParallel{}, ActivationSplit{}); }, params,
        [&](int, Backend& be) { return device_tensor(be, x, xs); }, [&](int) { return dy; });
    const size_t unsplit_bytes = alone.runs[0].saved_bytes;

    for (int r = 0; r < c.T; ++r) {
      CAPTURE(r);
      const LayerRun& p = plain.runs[static_cast<size_t>(r)];
      const LayerRun& f = first.runs[static_cast<size_t>(r)];
      const LayerRun& l = later.runs[static_cast<size_t>(r)];
      CHECK(first.shards[static_cast<size_t>(r)]->output_split({}) ==
            ActivationSplit{.features = false, .sequence = true});
      CHECK(first.shards[static_cast<size_t>(r)]->input_shape() == Shape{context, d});
      CHECK(later.shards[static_cast<size_t>(r)]->input_shape() == Shape{context / c.T, d});
      CHECK(later.shards[static_cast<size_t>(r)]->output_shape() == Shape{context / c.T, d});
      // Bit for bit: the output chunk, the input gradient (whole for the first block).
      CHECK(f.y == part(p.y, r));
      CHECK(l.y == part(p.y, r));
      CHECK(f.dx == p.dx);
      CHECK(l.dx == part(p.dx, r));
      // Activation memory (Korthikanti et al. 2022): with sequence parallelism everything the
      // block keeps for backward is 1/T of the unsplit block's (the LayerNorms' and the
      // column layers' inputs are chunks of the sequence, the rest is split by heads or
      // columns), exactly; plain TP keeps the whole sequence at the norms and column inputs.
      MESSAGE("T = ", c.T, ", (B, T') = (", c.B, ", ", c.Tp, "): saved bytes per rank, unsplit ",
              unsplit_bytes, ", plain TP ", p.saved_bytes, ", sequence-parallel ", f.saved_bytes,
              " (first block), ", l.saved_bytes, " (later block)");
      CHECK(f.saved_bytes * static_cast<size_t>(c.T) == unsplit_bytes);
      CHECK(l.saved_bytes == f.saved_bytes);
      CHECK(f.saved_bytes < p.saved_bytes);
      // The block's cost model says the same (per sample, at the full context).
      if (c.Tp == context)
        CHECK(static_cast<size_t>(later.shards[static_cast<size_t>(r)]->cost().activation_bytes *
                                  c.B) == l.saved_bytes);
    }
    // Parameter gradients: the linears' bit for bit, the LayerNorms' to rounding, and every
    // replicated gradient the same bits on every rank.
    const auto g_plain = whole_grads(ranks, plain);
    for (const BlockRuns* sp : {&first, &later}) {
      const auto g = whole_grads(ranks, *sp);
      const auto specs = whole.param_specs();
      double worst_ln = 0;
      for (size_t i = 0; i < specs.size(); ++i) {
        CAPTURE(specs[i].name);
        if (is_layernorm(specs[i].name))
          worst_ln = std::max(worst_ln, relative_diff(g[i], g_plain[i]));
        else
          CHECK(g[i] == g_plain[i]);
      }
      MESSAGE("LayerNorm gradients: largest difference from plain TP (relative) ", worst_ln);
      CHECK(worst_ln <= kLayerNormTolerance);
      CHECK(replicated_grads_agree(ranks, *sp));
    }
    for (auto* b : {&plain, &first, &later, &alone})
      for (auto& s : b->shards) s->unbind();
  }
}

TEST_CASE("sequence parallelism: T' not divisible by --tp, a context that does not split") {
  TpRanks ranks(2);
  TransformerBlock whole(32, 4, 8, 4, 0.02f);
  const auto params = whole_params(whole, 11);
  std::vector<std::string> errors(2);
  ranks.run([&](int r) {
    auto shard = whole.shard_for(ranks.tp(r, true), ActivationSplit{});
    BoundSlices bound = bind_slices(*shard, ranks.backend(r), params);
    const StepInfo info;
    LayerContext ctx(ranks.backend(r), info, 1);
    const Tensor x = device_tensor(ranks.backend(r), uniform_values(1, 2 * 5 * 32), {2, 5, 32});
    try {
      (void)shard->forward(x, ctx);
    } catch (const ShapeError& e) {
      errors[static_cast<size_t>(r)] = e.what();
    }
    shard->unbind();
  });
  for (const std::string& e : errors) {
    INFO(e);
    CHECK(e.find("T' = 5") != std::string::npos);
    CHECK(e.find("--tp 2") != std::string::npos);
    CHECK(e.find("--sequence-parallel off") != std::string::npos);
  }
  // The context must split too (the per-sample shapes of the chunks): 6 tokens across 4 ranks.
  TpRanks four(4);
  CHECK_THROWS_WITH_AS(shard_model(gpt(64, 6, 32, 1, 4), four.tp(1, true)),
                       doctest::Contains("context it is built for (6 tokens) does not divide by "
                                         "--tp 4"),
                       ShapeError);
  // Without sequence parallelism the same model shards (nothing splits the sequence).
  CHECK_NOTHROW(shard_model(gpt(64, 6, 32, 1, 4), four.tp(1, false)));
}

namespace {

// ---- the whole GPT, one micro-batch through the layers ------------------------------------
struct GptRun {
  double loss = 0;
  std::vector<float> logits;                        // this rank's (B, T', V / T)
  std::map<std::string, std::vector<float>> grads;  // whole, by parameter name
  size_t saved_bytes = 0;                           // after forward, all layers and the loss
  std::vector<std::unique_ptr<Model>> models;       // per rank
  std::vector<std::vector<BoundSlices>> bound;      // per rank, per layer
};

GptRun run_gpt(const TpRanks& ranks, bool sequence_parallel, const std::vector<int32_t>& ids,
               const std::vector<int32_t>& targets, int64_t B, int64_t Tp) {
  const auto make = [] { return gpt(64, 8, 32, 2, 4, /*tie_weights=*/false); };
  const Model whole = make();
  std::vector<std::vector<std::vector<float>>> params;
  for (int l = 0; l < whole.num_layers(); ++l)
    params.push_back(whole_params(whole.layer(l), hash_keys(17, static_cast<uint64_t>(l))));
  const int T = ranks.size();
  GptRun out;
  out.models.resize(static_cast<size_t>(T));
  out.bound.resize(static_cast<size_t>(T));
  std::vector<double> losses(static_cast<size_t>(T));
  std::vector<size_t> saved(static_cast<size_t>(T));
  std::vector<std::vector<float>> logits(static_cast<size_t>(T));
  ranks.run([&](int r) {
    Backend& be = ranks.backend(r);
    auto& model = out.models[static_cast<size_t>(r)];
    model = std::make_unique<Model>(shard_model(make(), ranks.tp(r, sequence_parallel)));
    for (int l = 0; l < model->num_layers(); ++l)
      out.bound[static_cast<size_t>(r)].push_back(
          bind_slices(model->layer(l), be, params[static_cast<size_t>(l)]));
    const StepInfo info;
    std::vector<std::unique_ptr<LayerContext>> ctx;
    for (int l = 0; l <= model->num_layers(); ++l)
      ctx.push_back(std::make_unique<LayerContext>(be, info, static_cast<uint64_t>(l)));
    Tensor x = be.empty(Shape{B, Tp}, DType::i32);
    be.copy_from_host(x.data(), ids.data(), x.bytes());
    Tensor t = be.empty(Shape{B, Tp}, DType::i32);
    be.copy_from_host(t.data(), targets.data(), t.bytes());
    for (int l = 0; l < model->num_layers(); ++l)
      x = model->layer(l).forward(x, *ctx[static_cast<size_t>(l)]);
    auto& lg = logits[static_cast<size_t>(r)];
    lg.resize(static_cast<size_t>(x.numel()));
    be.copy_to_host(lg.data(), x.data(), x.bytes());
    losses[static_cast<size_t>(r)] = model->loss().forward(x, t, B, *ctx.back());
    for (const auto& c : ctx) saved[static_cast<size_t>(r)] += c->saved_bytes();
    Tensor dy = model->loss().backward(*ctx.back());
    for (int l = model->num_layers() - 1; l >= 0; --l) {
      Layer& layer = model->layer(l);
      Tensor dx = layer.backward_input(dy, *ctx[static_cast<size_t>(l)]);
      layer.backward_weight(dy, *ctx[static_cast<size_t>(l)]);
      layer.complete_gradients(be);  // the step's only micro-batch
      dy = dx;
    }
    be.synchronize();
  });
  for (int r = 1; r < T; ++r) {
    CHECK(losses[static_cast<size_t>(r)] == losses[0]);
    CHECK(saved[static_cast<size_t>(r)] == saved[0]);
  }
  out.loss = losses[0];
  out.saved_bytes = saved[0];
  out.logits = logits[0];
  std::vector<Backend*> backends;
  for (int r = 0; r < T; ++r) backends.push_back(&ranks.backend(r));
  for (int l = 0; l < whole.num_layers(); ++l) {
    std::vector<const Layer*> layers;
    for (int r = 0; r < T; ++r) layers.push_back(&out.models[static_cast<size_t>(r)]->layer(l));
    const auto specs = whole.layer(l).param_specs();
    for (size_t i = 0; i < specs.size(); ++i)
      out.grads[parameter_name(l, whole.layer(l), specs[i].name)] =
          gather_whole(layers, i, backends);
  }
  return out;
}

void unbind_all(GptRun& run) {
  for (auto& m : run.models)
    for (int l = 0; l < m->num_layers(); ++l) m->layer(l).unbind();
}

}  // namespace

TEST_CASE("sequence parallelism: the whole GPT, one micro-batch, against plain TP") {
  struct Case {
    int T;
    int64_t B, Tp;
  };
  for (const Case c : {Case{2, 2, 8}, Case{2, 2, 6}, Case{4, 2, 8}, Case{4, 3, 4}}) {
    CAPTURE(c.T);
    CAPTURE(c.B);
    CAPTURE(c.Tp);
    TpRanks ranks(c.T);
    CounterRng rng(5);
    std::vector<int32_t> ids, targets;
    for (int64_t i = 0; i < c.B * c.Tp; ++i) {
      ids.push_back(static_cast<int32_t>(rng.next_below(64)));
      targets.push_back(static_cast<int32_t>(rng.next_below(64)));
    }
    GptRun plain = run_gpt(ranks, false, ids, targets, c.B, c.Tp);
    GptRun sp = run_gpt(ranks, true, ids, targets, c.B, c.Tp);
    // The same layers, names and parameter shapes (checkpoints cannot tell).
    const Model& ms = *sp.models[1];
    const Model& mp = *plain.models[1];
    CHECK(ms.signature() == mp.signature());
    for (int l = 0; l < ms.num_layers(); ++l) {
      CAPTURE(l);
      CHECK(ms.layer(l).name() == mp.layer(l).name());
      const auto a = ms.layer(l).param_specs(), b = mp.layer(l).param_specs();
      REQUIRE(a.size() == b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        CHECK(a[i].name == b[i].name);
        CHECK(a[i].shape == b[i].shape);
      }
    }
    // tok_emb, pos_emb whole; the blocks and ln_f on chunks; lm_head gathers the sequence.
    CHECK(ms.layer(2).input_shape() == Shape{8, 32});
    CHECK(ms.layer(3).input_shape() == Shape{8 / c.T, 32});
    CHECK(ms.layer(4).input_shape() == Shape{8 / c.T, 32});
    CHECK(ms.layer(5).output_shape() == Shape{8, 64 / c.T});
    // Bit for bit: the logits, the loss, every gradient but the LayerNorms'.
    CHECK(sp.logits == plain.logits);
    CHECK(sp.loss == plain.loss);
    double worst_ln = 0;
    for (const auto& item : plain.grads) {
      const auto& name = std::get<0>(item);
      const auto& g = std::get<1>(item);
      CAPTURE(name);
      if (name.find("ln") != std::string::npos)
        worst_ln = std::max(worst_ln, relative_diff(sp.grads.at(name), g));
      else
        CHECK(sp.grads.at(name) == g);
    }
    MESSAGE("T = ", c.T, ", (B, T') = (", c.B, ", ", c.Tp,
            "): activation bytes saved by forward "
            "per rank, plain TP ",
            plain.saved_bytes, ", sequence-parallel ", sp.saved_bytes,
            "; LayerNorm gradients differ by at most ", worst_ln, " (relative)");
    CHECK(worst_ln <= kLayerNormTolerance);
    CHECK(sp.saved_bytes < plain.saved_bytes);
    unbind_all(plain);
    unbind_all(sp);
  }
}

TEST_CASE("sequence parallelism: a model without a sequence ignores the flag") {
  TpRanks ranks(2);
  const Model with = shard_model(deep_mlp(4, 32, Shape{2, 4, 4}), ranks.tp(0, true));
  const Model without = shard_model(deep_mlp(4, 32, Shape{2, 4, 4}), ranks.tp(0, false));
  for (int l = 0; l < with.num_layers(); ++l) {
    CAPTURE(l);
    CHECK(with.layer(l).input_shape() == without.layer(l).input_shape());
    CHECK(with.layer(l).output_shape() == without.layer(l).output_shape());
  }
  // A layer that cannot run on a chunk after a sequence-parallel block is refused by name.
  Model odd = ModelBuilder(Shape{8, 32})
                  .add(std::make_unique<TransformerBlock>(32, 4, 8))
                  .flatten()
                  .linear(4)
                  .mse()
                  .build();
  CHECK_THROWS_WITH_AS(shard_model(std::move(odd), ranks.tp(1, true)),
                       doctest::Contains("cannot run on a chunk"), ShapeError);
}

// ---- training: 20 steps against plain tensor parallelism -----------------------------------
namespace {

constexpr int kSteps = 20;

TrainerConfig trainer_config(int microbatches) {
  TrainerConfig c;
  c.microbatches = microbatches;
  c.seed = 5;
  c.optimizer.kind = "sgd";
  c.optimizer.lr = 0.05f;
  c.optimizer.momentum = 0.9f;
  c.lr = {LrSchedule::Kind::constant, 0.05f, 0, 0, 0.f};
  c.clip_norm = 0.5f;
  return c;
}

struct Trained {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> params;  // by name and tensor rank: its own slices
  Shape block1_input;  // the per-sample input of layer 3 as tensor rank 0 built it
};

Trained train(const std::function<Model()>& make, const Tensor& x, const Tensor& y,
              const std::string& schedule, int D, int T, int M, bool sequence_parallel) {
  CpuDevices devices(D * T);
  Model shape_model = make();
  PipelineConfig pc = pipeline_config(shape_model, trainer_config(M), schedule, D, M);
  pc.schedule = sched::add_grad_reduction(pc.schedule);
  pc.parallel.sequence_parallel = sequence_parallel;
  auto trainer = make_local_data_parallel(make, devices.devices, pc, 1, T);
  Trained out;
  out.block1_input = trainer->replica(0).model().layer(3).input_shape();
  for (int k = 0; k < kSteps; ++k) out.losses.push_back(trainer->train_step(x, y).loss);
  for (int t = 0; t < T; ++t)
    for (const StageState& s : trainer->replica(t).stage_states())
      for (size_t i = 0; i < s.params->entries().size(); ++i) {
        const Tensor p = s.params->param(i);
        out.params[s.params->entries()[i].name + "@" + std::to_string(t)].assign(
            p.f32(), p.f32() + p.numel());
      }
  return out;
}

}  // namespace

TEST_CASE("sequence parallelism: 20 steps of training against plain tensor parallelism") {
  const auto make = [] { return gpt(64, 8, 32, 2, 4); };
  for (const int64_t Tp : {8, 4}) {  // the context, and shorter sequences
    CounterRng rng(99);
    std::vector<int32_t> xi, yi;
    for (int64_t i = 0; i < 8 * Tp; ++i) {
      xi.push_back(static_cast<int32_t>(rng.next_below(64)));
      yi.push_back(static_cast<int32_t>(rng.next_below(64)));
    }
    const Tensor x = Tensor::borrow(xi.data(), Shape{8, Tp}, DType::i32);
    const Tensor y = Tensor::borrow(yi.data(), Shape{8, Tp}, DType::i32);
    for (const auto& item :
         {std::tuple{std::string("1f1b"), 2, 2, 2}, std::tuple{std::string("zb-h1"), 2, 2, 2},
          std::tuple{std::string("gpipe"), 1, 4, 2}}) {
      const auto& schedule = std::get<0>(item);
      const auto& D = std::get<1>(item);
      const auto& T = std::get<2>(item);
      const auto& M = std::get<3>(item);
      CAPTURE(Tp);
      CAPTURE(schedule);
      CAPTURE(D);
      CAPTURE(T);
      const Trained plain = train(make, x, y, schedule, D, T, M, false);
      const Trained sp = train(make, x, y, schedule, D, T, M, true);
      double worst_loss = 0, worst_param = 0;
      for (size_t k = 0; k < plain.losses.size(); ++k)
        worst_loss = std::max(worst_loss,
                              std::abs(sp.losses[k] - plain.losses[k]) / std::abs(plain.losses[k]));
      REQUIRE(sp.params.size() == plain.params.size());
      for (const auto& [name, v] : plain.params)
        worst_param = std::max(worst_param, compare_tensors(sp.params.at(name), v).max_abs);
      MESSAGE("T' = ", Tp, " ", schedule, " S ", D, " T ", T,
              ": worst loss difference "
              "(relative) ",
              worst_loss, ", worst parameter difference ", worst_param);
      // The runtime built the blocks on chunks (the flag reached the layers).
      CHECK(sp.block1_input == Shape{8 / T, 32});
      CHECK(plain.block1_input == Shape{8, 32});
      CHECK(sp.losses[0] == plain.losses[0]);  // before any LayerNorm gradient was applied
      CHECK(worst_loss <= 2e-7);
      CHECK(worst_param <= 1e-6);
      CHECK(plain.losses.back() < plain.losses.front());
    }
  }
  // The MLP has no sequence: the flag changes nothing, bit for bit.
  const auto mlp = [] { return deep_mlp(4, 32, Shape{2, 4, 4}); };
  const SyntheticBatch data(24, Shape{2, 4, 4});
  const Trained off = train(mlp, data.x, data.y, "1f1b", 2, 2, 3, false);
  const Trained on = train(mlp, data.x, data.y, "1f1b", 2, 2, 3, true);
  CHECK(on.losses == off.losses);
  CHECK(on.params == off.params);
}
