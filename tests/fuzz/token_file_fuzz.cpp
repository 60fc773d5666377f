// Fuzz target: the token file readers (engine/data/token_file.h): a file of arbitrary bytes read
// as pipetrain-gpt's --data-format would read it, then the training/validation split, random
// training windows and the evaluation windows of the corpus it gives. The first 7 bytes of the
// input are the parameters: the format (llmc, uint16, auto with a .bin name, auto with a .txt
// name and no --vocab), the vocabulary (two bytes, little-endian, plus 1: 1 to 65536), then the
// fraction,
// context, batch and evaluation windows (small signed numbers, so zero and negative values are
// tried too); the rest is the file. Every input must load or be refused with UsageError (or its
// FileError), and every id of every window must lie in the corpus's vocabulary.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>

#include "engine/core/error.h"
#include "engine/data/token_file.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

// Every id of a batch is in [0, vocab), and targets are inputs shifted by one within a window.
void check_batch(const pt::TokenBatch& b, int64_t vocab) {
  const size_t n = static_cast<size_t>(b.batch * b.context);
  if (b.input_ids.size() != n || b.target_ids.size() != n) std::abort();
  for (size_t i = 0; i < n; ++i) {
    if (b.input_ids[i] < 0 || b.input_ids[i] >= vocab) std::abort();
    if (b.target_ids[i] < 0 || b.target_ids[i] >= vocab) std::abort();
    if ((i + 1) % static_cast<size_t>(b.context) != 0 && b.target_ids[i] != b.input_ids[i + 1])
      std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const pt::fuzz::ScratchFolder scratch;
  constexpr size_t kParams = 7;
  if (size < kParams) return 0;
  const int format = data[0] % 4;
  const std::optional<int64_t> vocab =
      format == 3 ? std::nullopt : std::optional<int64_t>((data[1] | data[2] << 8) + 1);
  const double fraction = data[3] / 255.0;  // includes 0 and 1, which split() refuses
  const auto context = static_cast<int64_t>(static_cast<int8_t>(data[4]));
  const auto batch = static_cast<int64_t>(static_cast<int8_t>(data[5]));
  const auto max_windows = static_cast<int64_t>(static_cast<int8_t>(data[6]));
  const std::filesystem::path file =
      scratch.write(format == 3 ? "tokens.txt" : "tokens.bin", data + kParams, size - kParams);

  pt::fuzz::load_or_refuse<pt::UsageError>([&] {
    const pt::DataFormat requested = format == 0   ? pt::DataFormat::llmc
                                     : format == 1 ? pt::DataFormat::uint16
                                                   : pt::DataFormat::automatic;
    const pt::TokenCorpus corpus = pt::load_corpus(file, requested, vocab);
    // A token file holds (size - header) / 2 tokens; text (auto, .txt) one per byte.
    const auto bytes = static_cast<int64_t>(size - kParams);
    if (corpus.size() != bytes / 2 && corpus.size() != (bytes - pt::kLlmcHeaderBytes) / 2 &&
        corpus.size() != bytes)
      std::abort();
    pt::fuzz::load_or_refuse<pt::UsageError>([&] {
      const pt::TokenCorpus::Split parts = corpus.split(fraction);
      if (parts.train.size() + parts.validation.size() != corpus.size()) std::abort();
      pt::fuzz::load_or_refuse<pt::UsageError>(
          [&] { check_batch(parts.train.sample_batch(batch, context, 1234, 7), corpus.vocab()); });
      pt::fuzz::load_or_refuse<pt::UsageError>([&] {
        pt::WindowIterator windows(parts.validation, batch, context, max_windows);
        pt::TokenBatch b;
        int64_t seen = 0;
        while (windows.next(b)) {
          check_batch(b, corpus.vocab());
          seen += b.batch;
        }
        if (seen != windows.windows()) std::abort();
      });
    });
  });
  return 0;
}
