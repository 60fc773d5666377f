#include "engine/data/token_corpus.h"

#include <algorithm>
#include <string_view>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/core/random.h"

namespace pt {

namespace {

void check_window(std::string_view what, int64_t batch, int64_t context) {
  if (batch < 1 || context < 1)
    throw UsageError(
        fmt::format("{}: batch {} and context {} must be at least 1", what, batch, context));
}

// Writes window [start, start + T) of `tokens` into row b of the batch.
void put_window(std::span<const uint16_t> tokens, int64_t start, int64_t b, TokenBatch& out) {
  const int64_t T = out.context;
  for (int64_t t = 0; t < T; ++t) {
    const auto i = static_cast<size_t>(start + t);
    out.input_ids[static_cast<size_t>(b * T + t)] = tokens[i];
    out.target_ids[static_cast<size_t>(b * T + t)] = tokens[i + 1];
  }
}

TokenBatch empty_batch(int64_t batch, int64_t context) {
  TokenBatch out;
  out.batch = batch;
  out.context = context;
  out.input_ids.resize(static_cast<size_t>(batch * context));
  out.target_ids.resize(static_cast<size_t>(batch * context));
  return out;
}

}  // namespace

// ---- batches ---------------------------------------------------------------------------------
Tensor TokenBatch::inputs() const {
  return Tensor::borrow(const_cast<int32_t*>(input_ids.data()), Shape{batch, context}, DType::i32);
}
Tensor TokenBatch::targets() const {
  return Tensor::borrow(const_cast<int32_t*>(target_ids.data()), Shape{batch, context}, DType::i32);
}

int64_t padded_vocab(int64_t vocab) {
  constexpr int64_t kMultiple = 128;
  return (vocab + kMultiple - 1) / kMultiple * kMultiple;
}

// ---- the corpus ------------------------------------------------------------------------------
TokenCorpus::TokenCorpus(std::vector<uint16_t> tokens, int64_t vocab, std::string source)
    : tokens_(std::make_shared<const std::vector<uint16_t>>(std::move(tokens))),
      size_(static_cast<int64_t>(tokens_->size())),
      vocab_(vocab),
      source_(std::move(source)) {
  if (vocab < 1 || vocab > kMaxTokenVocab)
    throw UsageError(
        fmt::format("{}: a vocabulary of {} ids; it must be between 1 and {} (the "
                    "ids are uint16)",
                    source_, vocab, kMaxTokenVocab));
  const auto bad =
      std::find_if(tokens_->begin(), tokens_->end(), [&](uint16_t id) { return id >= vocab; });
  if (bad != tokens_->end())
    throw UsageError(fmt::format(
        "{} holds token {} at position {} (counting from 0), outside the vocabulary [0, {}); "
        "give the vocabulary of the tokenizer that made it (e.g. --vocab 50257 for GPT-2's)",
        source_, *bad, bad - tokens_->begin(), vocab));
}

TokenCorpus::TokenCorpus(std::shared_ptr<const std::vector<uint16_t>> tokens, int64_t begin,
                         int64_t size, int64_t vocab, std::string source)
    : tokens_(std::move(tokens)),
      begin_(begin),
      size_(size),
      vocab_(vocab),
      source_(std::move(source)) {}

TokenCorpus::Split TokenCorpus::split(double validation_fraction) const {
  if (!(validation_fraction > 0.0 && validation_fraction < 1.0))
    throw UsageError(
        fmt::format("the validation fraction must be between 0 and 1 (exclusive) but "
                    "got {}",
                    validation_fraction));
  const auto n_val = static_cast<int64_t>(static_cast<double>(size()) * validation_fraction);
  const int64_t n_train = size() - n_val;
  if (n_val < 2 || n_train < 2)
    throw UsageError(
        fmt::format("{} has {} tokens: too few to split {} / {} into training and "
                    "validation; use a longer text or another fraction",
                    source_, size(), n_train, n_val));
  return {TokenCorpus(tokens_, begin_, n_train, vocab_, source_ + " (training part)"),
          TokenCorpus(tokens_, begin_ + n_train, n_val, vocab_, source_ + " (validation part)")};
}

TokenBatch TokenCorpus::sample_batch(int64_t batch, int64_t context, uint64_t seed,
                                     int64_t step) const {
  check_window("sample_batch", batch, context);
  if (size() < context + 1)
    throw UsageError(
        fmt::format("{} has {} tokens but a window of context {} needs {} (inputs and "
                    "targets shifted by one); use a shorter --context or a longer text",
                    source_, size(), context, context + 1));
  // Starts in [0, size - T - 1]: the last target is tokens[start + T] < size.
  const auto starts = static_cast<uint64_t>(size() - context);
  CounterRng rng(hash_keys(hash_keys(seed, 0x7e47), static_cast<uint64_t>(step)));
  TokenBatch out = empty_batch(batch, context);
  for (int64_t b = 0; b < batch; ++b)
    put_window(tokens(), static_cast<int64_t>(rng.next_below(starts)), b, out);
  return out;
}

int64_t TokenCorpus::window_count(int64_t context) const {
  check_window("window_count", 1, context);
  return size() < 1 ? 0 : (size() - 1) / context;
}

TokenBatch TokenCorpus::windows(int64_t first, int64_t count, int64_t context) const {
  check_window("windows", count, context);
  if (first < 0 || first + count > window_count(context))
    throw UsageError(fmt::format("windows [{}, {}) of context {}: {} has only {}", first,
                                 first + count, context, source_, window_count(context)));
  TokenBatch out = empty_batch(count, context);
  for (int64_t b = 0; b < count; ++b) put_window(tokens(), (first + b) * context, b, out);
  return out;
}

// ---- evaluation windows ----------------------------------------------------------------------
WindowIterator::WindowIterator(const TokenCorpus& corpus, int64_t batch, int64_t context,
                               int64_t max_windows)
    : corpus_(&corpus), batch_(batch), context_(context) {
  check_window("evaluation windows", batch, context);
  if (max_windows < 0)
    throw UsageError(fmt::format(
        "the number of evaluation windows must be >= 0 (0: all) but got {}", max_windows));
  const int64_t total = corpus.window_count(context);
  if (total < 1)
    throw UsageError(
        fmt::format("{} has {} tokens: no evaluation window of context {} fits (it "
                    "needs {}); use a shorter context or more validation text",
                    corpus.source(), corpus.size(), context, context + 1));
  if (max_windows > 0 && max_windows < total) {
    stride_ = total / max_windows;
    selected_ = std::min(max_windows, (total + stride_ - 1) / stride_);
  } else {
    selected_ = total;
  }
}

bool WindowIterator::next(TokenBatch& out) {
  if (done_ >= selected_) return false;
  const int64_t count = std::min(batch_, selected_ - done_);
  out = empty_batch(count, context_);
  for (int64_t b = 0; b < count; ++b)
    put_window(corpus_->tokens(), (done_ + b) * stride_ * context_, b, out);
  done_ += count;
  return true;
}

}  // namespace pt
