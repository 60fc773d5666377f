// Sampling from a byte-level gpt(): copying trained parameters by name (from any split into
// stages), determinism for a seed, greedy decoding (temperature 0, top-k 1) against a hand-run
// arg-max on the trained model, top-k, the crop of a long prompt to the context, bad arguments.
#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/inference/generate.h"
#include "engine/train/stage_parameters.h"
#include "engine/train/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/builder.h"
#include "layers/zoo.h"

using namespace pt;

namespace {

constexpr int64_t kVocab = 256, kContext = 8, kD = 16;

// Untied: what is checked here is sampling, and the expected greedy text was learnt untied.
Model tiny_gpt() {
  return gpt(kVocab, kContext, kD, /*n_layers=*/1, /*n_heads=*/2, /*tie_weights=*/false);
}

std::vector<float> host_values(const StageParameters& p, size_t i) {
  const Tensor t = p.param(i);
  std::vector<float> v(static_cast<size_t>(t.numel()));
  p.backend().copy_to_host(v.data(), t.data(), t.bytes());
  return v;
}

// A trained-looking model: a few AdamW steps on a repetitive text, so the logits are far from
// uniform and greedy decoding has clear winners.
struct Trained {
  std::unique_ptr<Backend> be = make_cpu_backend(0, 1);
  Model model = tiny_gpt();
  std::unique_ptr<Trainer> trainer;
  Trained() {
    TrainerConfig cfg;
    cfg.seed = 9;
    cfg.optimizer.kind = "adamw";
    cfg.optimizer.lr = 1e-2f;
    cfg.lr = {LrSchedule::Kind::constant, 1e-2f, 0, 0, 0.f};
    trainer = std::make_unique<Trainer>(model, *be, cfg);
    const std::string text = "abcabdabcabdabcabdabcabd";
    std::vector<int32_t> x, y;
    for (int64_t b = 0; b < 4; ++b)
      for (int64_t t = 0; t < kContext; ++t) {
        x.push_back(text[static_cast<size_t>(b + t)]);
        y.push_back(text[static_cast<size_t>(b + t + 1)]);
      }
    for (int s = 0; s < 20; ++s)
      trainer->train_step(Tensor::borrow(x.data(), Shape{4, kContext}, DType::i32),
                          Tensor::borrow(y.data(), Shape{4, kContext}, DType::i32));
  }
  std::string sample(const std::string& prompt, const SamplingOptions& o) {
    Model fresh = tiny_gpt();
    return generate(fresh, trainer->stage_states(), *be, prompt, o);
  }
};

SamplingOptions opts(int64_t n, float temperature, int64_t top_k, uint64_t seed) {
  SamplingOptions o;
  o.max_new_tokens = n;
  o.temperature = temperature;
  o.top_k = top_k;
  o.seed = seed;
  return o;
}

}  // namespace

TEST_CASE("copy_trained_parameters: by name, from stages split anywhere, on other devices") {
  auto be0 = make_cpu_backend(0, 1), be1 = make_cpu_backend(1, 1);
  Model split = tiny_gpt(), whole = tiny_gpt(), target = tiny_gpt();
  StageParameters first(split, 0, 2, *be0, 7), second(split, 2, split.num_layers(), *be1, 7);
  StageParameters reference(whole, 0, whole.num_layers(), *be0, 7);  // same seed: same values
  StageParameters into(target, 0, target.num_layers(), *be0, 1234);
  const std::vector<StageState> trained{{&first, nullptr}, {&second, nullptr}};
  copy_trained_parameters(trained, into);
  REQUIRE(into.entries().size() == reference.entries().size());
  for (size_t i = 0; i < into.entries().size(); ++i) {
    INFO(into.entries()[i].name);
    CHECK(host_values(into, i) == host_values(reference, i));
  }
  // Half the model is not enough.
  Model other = tiny_gpt();
  StageParameters more(other, 0, other.num_layers(), *be0, 1);
  const std::vector<StageState> half{{&first, nullptr}};
  CHECK_THROWS_WITH_AS(copy_trained_parameters(half, more),
                       doctest::Contains("no trained stage holds the parameter '2.block0."),
                       UsageError);
}

TEST_CASE("generate: deterministic for a seed, different for another") {
  Trained t;
  const SamplingOptions o = opts(24, 1.f, 0, 5);
  const std::string a = t.sample("ab", o);
  CHECK(a.size() == 24);
  CHECK(t.sample("ab", o) == a);
  CHECK(t.sample("ab", opts(24, 1.f, 0, 6)) != a);
  CHECK(t.sample("ab", opts(0, 1.f, 0, 5)).empty());
}

TEST_CASE("generate: temperature 0 and top-k 1 are greedy, the arg-max of the trained model") {
  Trained t;
  const std::string greedy = t.sample("abca", opts(6, 0.f, 0, 1));
  CHECK(t.sample("abca", opts(6, 1.f, 1, 99)) == greedy);   // top-k 1, any seed
  CHECK(t.sample("abca", opts(6, 1e-4f, 0, 3)) == greedy);  // temperature -> 0
  // By hand on the trained (pipeline-free) model itself: forward, arg-max of the last row.
  std::vector<int32_t> tokens{'a', 'b', 'c', 'a'};
  std::string want;
  for (int i = 0; i < 6; ++i) {
    const size_t from = tokens.size() > kContext ? tokens.size() - kContext : 0;
    const auto T = static_cast<int64_t>(tokens.size() - from);
    Tensor x = Tensor::borrow(tokens.data() + from, Shape{1, T}, DType::i32);
    const StepInfo info{0, 0, 0, false};
    for (int l = 0; l < t.model.num_layers(); ++l) {
      LayerContext ctx(*t.be, info, static_cast<uint64_t>(l));
      x = t.model.layer(l).forward(x, ctx);
    }
    const float* last = x.f32() + (T - 1) * kVocab;
    const auto id = static_cast<int32_t>(std::max_element(last, last + kVocab) - last);
    tokens.push_back(id);
    want += static_cast<char>(id);
  }
  CHECK(greedy == want);
  CHECK(greedy.substr(0, 2) == "bd");  // it learnt the text: "abca" -> "bd..." (abcabd)
}

TEST_CASE(
    "generate: a model with a skip connection (save/add_saved) samples its own forward pass") {
  auto be = make_cpu_backend(0, 1);
  Model m = ModelBuilder(Shape{kContext}, DType::i32)
                .embedding(kVocab, kD)
                .save("e")
                .linear(kD)
                .add_saved("e")
                .linear(kVocab)
                .cross_entropy()
                .build();
  const StageParameters params(m, 0, m.num_layers(), *be, /*seed=*/4);
  const std::vector<int32_t> prompt{'a', 'b', 'c'};
  const std::vector<int32_t> got = sample_tokens(m, *be, prompt, opts(3, 0.f, 0, 1));
  // By hand: every layer's forward with one skip board for the pass, the arg-max of the last row.
  std::vector<int32_t> tokens = prompt, want;
  for (int i = 0; i < 3; ++i) {
    const auto T = static_cast<int64_t>(tokens.size());
    Tensor x = Tensor::borrow(tokens.data(), Shape{1, T}, DType::i32);
    const StepInfo info{0, 0, 0, false};
    SkipBoard board;
    for (int l = 0; l < m.num_layers(); ++l) {
      LayerContext ctx(*be, info, static_cast<uint64_t>(l));
      ctx.set_skips(&board);
      x = m.layer(l).forward(x, ctx);
    }
    const float* last = x.f32() + (T - 1) * kVocab;
    tokens.push_back(static_cast<int32_t>(std::max_element(last, last + kVocab) - last));
    want.push_back(tokens.back());
  }
  CHECK(got == want);
}

TEST_CASE("generate: top-k keeps only the k most likely tokens") {
  Trained t;
  const std::string best = t.sample("ab", opts(1, 0.f, 0, 0));
  std::set<char> firsts;
  for (uint64_t seed = 0; seed < 60; ++seed)
    firsts.insert(t.sample("ab", opts(1, 20.f, 2, seed))[0]);
  CHECK(firsts.size() == 2);  // hot enough that both show up in 60 draws
  CHECK(firsts.count(best[0]) == 1);
  std::set<char> any;
  for (uint64_t seed = 0; seed < 60; ++seed) any.insert(t.sample("ab", opts(1, 20.f, 0, seed))[0]);
  CHECK(any.size() > 2);
}

TEST_CASE("generate: a prompt longer than the context is cropped to its last T bytes") {
  Trained t;
  const std::string long_prompt = "xyzxyzxyzxyzabcabdab";  // 20 bytes, context 8
  const SamplingOptions o = opts(10, 1.f, 0, 4);
  CHECK(t.sample(long_prompt, o) == t.sample(long_prompt.substr(20 - kContext), o));
}

TEST_CASE("generate: bad arguments are UsageErrors") {
  Trained t;
  CHECK_THROWS_WITH_AS(t.sample("ab", opts(5, -1.f, 0, 0)),
                       doctest::Contains("temperature must be >= 0"), UsageError);
  CHECK_THROWS_AS(t.sample("ab", opts(5, std::numeric_limits<float>::quiet_NaN(), 0, 0)),
                  UsageError);
  CHECK_THROWS_WITH_AS(t.sample("ab", opts(5, 1.f, -2, 0)), doctest::Contains("top-k must be >= 0"),
                       UsageError);
  CHECK_THROWS_AS(t.sample("ab", opts(-1, 1.f, 0, 0)), UsageError);
  CHECK_THROWS_WITH_AS(t.sample("", opts(5, 1.f, 0, 0)), doctest::Contains("the prompt is empty"),
                       UsageError);
  // A model that is not a language model.
  auto be = make_cpu_backend(0, 1);
  Model mlp = deep_mlp(1, 8, Shape{4});
  StageParameters p(mlp, 0, mlp.num_layers(), *be, 0);
  const int32_t id = 1;
  CHECK_THROWS_WITH_AS(sample_tokens(mlp, *be, std::span(&id, 1), opts(1, 1.f, 0, 0)),
                       doctest::Contains("sampling needs a language model"), UsageError);
}
