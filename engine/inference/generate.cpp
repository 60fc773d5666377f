#include "engine/inference/generate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/core/random.h"
#include "engine/train/forward_pass.h"

namespace pt {

namespace {

struct Source {
  const StageParameters* stage;
  size_t index;
};

// Host copy of parameter `index` of `stage` (wherever its device is).
void read_param(const Source& s, float* out) {
  const Tensor t = s.stage->param(s.index);
  s.stage->backend().copy_to_host(out, t.data(), t.bytes());
}

// The logits at the last position of `window` (1, T'), on the host.
std::vector<float> last_logits(const Model& model, Backend& device, std::span<const int32_t> window,
                               int64_t vocab) {
  const auto T = static_cast<int64_t>(window.size());
  Tensor x = device.empty(Shape{1, T}, DType::i32);
  device.copy_from_host(x.data(), window.data(), x.bytes());
  MicrobatchContexts ctx(device, StepInfo{0, 0, 0, /*training=*/false}, 0, model.num_layers(),
                         false);
  x = forward_layers(model, 0, model.num_layers(), x, ctx);
  std::vector<float> logits(static_cast<size_t>(vocab));
  device.copy_to_host(logits.data(), x.f32() + (T - 1) * vocab, logits.size() * sizeof(float));
  return logits;
}

// Greedy: the arg-max, the lowest id among equal maxima.
int32_t arg_max(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Draws from softmax(logits / temperature) restricted to the top_k largest logits, with the
// uniform number u in [0, 1).
int32_t draw(const std::vector<float>& logits, float temperature, int64_t top_k, double u) {
  const auto V = static_cast<int64_t>(logits.size());
  const int64_t k = top_k == 0 ? V : std::min(top_k, V);
  // Ids by logit, largest first (ties: lower id first), the first k of them.
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  });
  order.resize(static_cast<size_t>(k));
  // softmax in double, shifted by the largest logit so exp never overflows.
  const double top = logits[static_cast<size_t>(order[0])];
  std::vector<double> p(order.size());
  double total = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    p[i] = std::exp((static_cast<double>(logits[static_cast<size_t>(order[i])]) - top) /
                    static_cast<double>(temperature));
    total += p[i];
  }
  double acc = 0;
  const double target = u * total;
  for (size_t i = 0; i < order.size(); ++i) {
    acc += p[i];
    if (target < acc) return order[i];
  }
  return order.back();  // u * total rounded up to the last partial sum
}

void require_prompt(size_t tokens) {
  if (tokens == 0)
    throw UsageError(
        "the prompt is empty; give at least one token to start from (for text: one "
        "byte, e.g. a newline)");
}

}  // namespace

void SamplingOptions::validate() const {
  if (!(temperature >= 0.f) || !std::isfinite(temperature))
    throw UsageError(
        fmt::format("temperature must be >= 0 (0: always the most likely token) but "
                    "got {}",
                    temperature));
  if (top_k < 0)
    throw UsageError(
        fmt::format("top-k must be >= 0 (0: no limit, 1: always the most likely "
                    "token) but got {}",
                    top_k));
  if (max_new_tokens < 0)
    throw UsageError(
        fmt::format("the number of tokens to sample must be >= 0 but got {}", max_new_tokens));
}

// ---- parameters ----------------------------------------------------------------------------
void copy_trained_parameters(std::span<const StageState> trained, StageParameters& into,
                             Communicator* world) {
  std::map<std::string, Source> sources;
  for (const StageState& s : trained)
    for (size_t i = 0; i < s.params->entries().size(); ++i)
      sources.emplace(s.params->entries()[i].name, Source{s.params, i});

  const auto& entries = into.entries();
  const size_t n = entries.size();
  std::vector<uint8_t> held(n);  // 1 where this process holds the parameter
  for (size_t i = 0; i < n; ++i) {
    const auto it = sources.find(entries[i].name);
    if (it == sources.end()) continue;
    const Tensor want = into.param(i), have = it->second.stage->param(it->second.index);
    if (want.shape() != have.shape())
      throw UsageError(
          fmt::format("cannot copy the trained parameter '{}': it is {} but the model "
                      "to sample from has {}; build both with the same settings",
                      entries[i].name, have.shape().str(), want.shape().str()));
    held[i] = 1;
  }
  // Who supplies each parameter: this process, or (MPI) the lowest rank holding it.
  const int ranks = world ? world->size() : 1;
  const int me = world ? world->rank() : 0;
  std::vector<uint8_t> all_held = held;
  if (world) {
    all_held.resize(n * static_cast<size_t>(ranks));
    world->all_gather(held.data(), all_held.data(), n, "which process holds which parameter");
  }
  std::vector<int> owner(n, -1);
  for (size_t i = 0; i < n; ++i)
    for (int r = ranks - 1; r >= 0; --r)
      if (all_held[static_cast<size_t>(r) * n + i]) owner[i] = r;
  for (size_t i = 0; i < n; ++i)
    if (owner[i] < 0)
      throw UsageError(
          fmt::format("no trained stage holds the parameter '{}'; pass the states "
                      "of every stage (TrainingEngine::stage_states()){}",
                      entries[i].name, world ? "" : ", or the world communicator under MPI"));

  if (!world) {
    std::vector<float> buf;
    for (size_t i = 0; i < n; ++i) {
      const Tensor dst = into.param(i);
      buf.resize(static_cast<size_t>(dst.numel()));
      read_param(sources.at(entries[i].name), buf.data());
      into.backend().copy_from_host(dst.data(), buf.data(), dst.bytes());
    }
    return;
  }
  // Under MPI: one flat buffer where every value is written by its owner and is 0 elsewhere;
  // the sum over ranks is then exact (x + 0 + ... = x, bit for bit).
  std::vector<int64_t> offset(n + 1, 0);
  for (size_t i = 0; i < n; ++i) offset[i + 1] = offset[i] + into.param(i).numel();
  std::vector<float> flat(static_cast<size_t>(offset[n]), 0.f);
  for (size_t i = 0; i < n; ++i)
    if (owner[i] == me) read_param(sources.at(entries[i].name), flat.data() + offset[i]);
  world->all_reduce(flat.data(), offset[n], ElemType::f32, ReduceOp::sum,
                    "the trained parameters for sampling");
  for (size_t i = 0; i < n; ++i) {
    const Tensor dst = into.param(i);
    into.backend().copy_from_host(dst.data(), flat.data() + offset[i], dst.bytes());
  }
}

// ---- sampling ------------------------------------------------------------------------------
std::vector<int32_t> sample_tokens(const Model& model, Backend& device,
                                   std::span<const int32_t> prompt,
                                   const SamplingOptions& options) {
  options.validate();
  const Shape& in = model.input_shape();
  const Shape& out = model.output_shape();
  if (model.input_dtype() != DType::i32 || in.rank() != 1 || out.rank() != 2 || out[0] != in[0])
    throw UsageError(
        fmt::format("sampling needs a language model from token ids (T) int32 to "
                    "logits (T, vocab), but this one maps {} {} to {}",
                    dtype_name(model.input_dtype()), in.str(), out.str()));
  const int64_t T = in[0], vocab = out[1];
  require_prompt(prompt.size());
  for (int32_t id : prompt)
    if (id < 0 || id >= vocab)
      throw UsageError(
          fmt::format("the prompt holds the token id {}, outside the model's "
                      "vocabulary [0, {})",
                      id, vocab));

  std::vector<int32_t> tokens(prompt.begin(), prompt.end());
  const bool greedy = options.temperature == 0.f || options.top_k == 1;
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    // The model sees at most its context: the last T tokens.
    const size_t from =
        tokens.size() > static_cast<size_t>(T) ? tokens.size() - static_cast<size_t>(T) : 0;
    const std::vector<float> logits =
        last_logits(model, device, std::span(tokens).subspan(from), vocab);
    const uint64_t position = tokens.size() - prompt.size();  // counter of this draw
    tokens.push_back(greedy ? arg_max(logits)
                            : draw(logits, options.temperature, options.top_k,
                                   CounterRng(hash_keys(options.seed, position)).next_double()));
  }
  return {tokens.begin() + static_cast<std::ptrdiff_t>(prompt.size()), tokens.end()};
}

std::string generate(Model& model, std::span<const StageState> trained, Backend& device,
                     std::string_view prompt, const SamplingOptions& options, Communicator* world) {
  options.validate();  // before the copy: under MPI every process must fail alike, early
  require_prompt(prompt.size());
  StageParameters params(model, 0, model.num_layers(), device, /*seed=*/0);
  copy_trained_parameters(trained, params, world);
  std::vector<int32_t> ids;
  for (char c : prompt) ids.push_back(static_cast<unsigned char>(c));
  const std::vector<int32_t> sampled = sample_tokens(model, device, ids, options);
  std::string text;
  for (int32_t id : sampled) text += static_cast<char>(id);
  return text;
}

}  // namespace pt
