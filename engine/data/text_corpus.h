#pragma once
// A byte-level text corpus for language models: every byte is a token (vocab 256), so there is
// no tokenizer to train or ship. Loaded from a file, or from Debian's King James Bible (the
// `bible` program of package bible-kjv, 4.4 MB of ASCII), cached after the first run.
//
// Batches are pure functions of (seed, step): batch b of step s is the same on every process
// and in every run, so pipelined, data-parallel and single-device runs train on the same
// tokens. Language-model windows: inputs = bytes[i, i + T), targets = bytes[i + 1, i + T + 1).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace pt {

// One batch of windows as host tensors: inputs and targets (B, T) int32.
struct TextBatch {
  int64_t batch = 0;                // B
  int64_t context = 0;              // T
  std::vector<int32_t> input_ids;   // (B, T), row-major
  std::vector<int32_t> target_ids;  // (B, T): input_ids shifted by one position

  // Views of the vectors above (they stay valid while this batch lives and is not resized).
  // The engines only read them; borrow() needs a non-const pointer.
  Tensor inputs() const;
  Tensor targets() const;
};

class TextCorpus {
 public:
  static constexpr int64_t kVocab = 256;  // byte-level

  TextCorpus() = default;
  // `source` says where the bytes came from, for messages ("file 'x.txt'", "bible-kjv").
  TextCorpus(std::vector<uint8_t> bytes, std::string source);

  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  const std::string& source() const { return source_; }

  struct Split;
  // The first (1 - validation_fraction) of the bytes for training, the contiguous tail for
  // validation (so no validation window overlaps a training window). Throws UsageError unless
  // 0 < validation_fraction < 1 and both parts have at least 2 bytes.
  Split split(double validation_fraction) const;

  // B random windows of length T: window b starts at a position drawn from
  // CounterRng(hash(seed, step)), uniform over every start whose targets fit. Throws
  // UsageError for B < 1, T < 1 or a corpus shorter than T + 1 bytes.
  TextBatch sample_batch(int64_t batch, int64_t context, uint64_t seed, int64_t step) const;

  // The fixed, non-overlapping windows for evaluation: window k starts at k * T, for
  // k < (size - 1) / T (every window's targets fit).
  int64_t window_count(int64_t context) const;
  // Windows [first, first + count) of those, as one batch (B = count).
  TextBatch windows(int64_t first, int64_t count, int64_t context) const;

 private:
  std::vector<uint8_t> bytes_;
  std::string source_;
};

struct TextCorpus::Split {
  TextCorpus train, validation;
};

// Evaluation over fixed windows of a corpus, in batches of at most B: all window_count(T)
// windows, or `max_windows` of them spread evenly over the corpus (every
// (window_count / max_windows)-th one) when there are more. The same windows every time.
class WindowIterator {
 public:
  // Throws UsageError for B < 1, T < 1, max_windows < 0, or no window at all. max_windows = 0:
  // all windows.
  WindowIterator(const TextCorpus& corpus, int64_t batch, int64_t context, int64_t max_windows = 0);

  // The next batch, or false after the last one.
  bool next(TextBatch& out);
  // Windows this iterator visits in all, and tokens (windows * T).
  int64_t windows() const { return selected_; }
  int64_t tokens() const { return selected_ * context_; }

 private:
  const TextCorpus* corpus_;
  int64_t batch_, context_;
  int64_t stride_ = 1;    // every stride-th window of the corpus
  int64_t selected_ = 0;  // windows visited in all
  int64_t done_ = 0;      // windows returned so far
};

// Reads a text file as bytes. Throws FileError when it cannot be read or is empty.
TextCorpus load_text_corpus(const std::filesystem::path& path);

// The cache folder: $XDG_CACHE_HOME/pipetrain, else $HOME/.cache/pipetrain, else
// <temp dir>/pipetrain-cache.
std::filesystem::path default_cache_dir();

// The King James Bible, one verse per line ("Ge1:1 In the beginning God created ..."), as
// printed by `bible -f Gen1:1-Rev22:21`. Read from cache_dir/bible-kjv.cache when present and
// its size and CRC-32 check; else runs `program` (stopped after `timeout_seconds`) and writes
// that file atomically (if the folder is not writable the text is still returned). Throws
// FileError naming the package (bible-kjv) when the program is missing, fails, prints too little
// or does not finish in time.
TextCorpus bible_corpus(const std::filesystem::path& cache_dir = default_cache_dir(),
                        const std::string& program = "bible", double timeout_seconds = 60);

}  // namespace pt
