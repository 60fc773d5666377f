// Fuzz target: the text corpus loader (engine/data/text_corpus.h): a file of arbitrary bytes,
// then what pipetrain-gpt does with it: the training/validation split, random training windows,
// and the evaluation windows. The first 6 bytes of the input are the parameters (small signed
// numbers, so zero and negative values are tried too); the rest is the file. Every input must
// load or be refused with UsageError (or its FileError), and every window must lie in the text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "engine/core/error.h"
#include "engine/data/text_corpus.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

// Every token of a batch is a byte of the corpus, in range, and targets are inputs shifted by one
// within each window.
void check_batch(const pt::TokenBatch& b) {
  const size_t n = static_cast<size_t>(b.batch * b.context);
  if (b.input_ids.size() != n || b.target_ids.size() != n) std::abort();
  for (size_t i = 0; i < n; ++i) {
    if (b.input_ids[i] < 0 || b.input_ids[i] >= pt::kByteVocab) std::abort();
    if ((i + 1) % static_cast<size_t>(b.context) != 0 && b.target_ids[i] != b.input_ids[i + 1])
      std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const pt::fuzz::ScratchFolder scratch;
  constexpr size_t kParams = 6;
  if (size < kParams) return 0;
  const double fraction = data[0] / 255.0;  // includes 0 and 1, which split() refuses
  const auto context = static_cast<int64_t>(static_cast<int8_t>(data[1]));
  const auto batch = static_cast<int64_t>(static_cast<int8_t>(data[2]));
  const auto max_windows = static_cast<int64_t>(static_cast<int8_t>(data[3]));
  const auto first = static_cast<int64_t>(static_cast<int8_t>(data[4]));
  const auto count = static_cast<int64_t>(static_cast<int8_t>(data[5]));
  const std::filesystem::path file = scratch.write("corpus.txt", data + kParams, size - kParams);

  pt::fuzz::load_or_refuse<pt::UsageError>([&] {
    const pt::TokenCorpus corpus = pt::load_text_corpus(file);
    if (corpus.size() != static_cast<int64_t>(size - kParams)) std::abort();
    pt::fuzz::load_or_refuse<pt::UsageError>([&] {
      const pt::TokenCorpus::Split parts = corpus.split(fraction);
      if (parts.train.size() + parts.validation.size() != corpus.size()) std::abort();
      pt::fuzz::load_or_refuse<pt::UsageError>(
          [&] { check_batch(parts.train.sample_batch(batch, context, 1234, 7)); });
      pt::fuzz::load_or_refuse<pt::UsageError>([&] {
        pt::WindowIterator windows(parts.validation, batch, context, max_windows);
        pt::TokenBatch b;
        int64_t seen = 0;
        while (windows.next(b)) {
          check_batch(b);
          seen += b.batch;
        }
        if (seen != windows.windows()) std::abort();
      });
    });
    pt::fuzz::load_or_refuse<pt::UsageError>(
        [&] { check_batch(corpus.windows(first, count, context)); });
  });
  return 0;
}
