// Byte-level text as a token corpus (text_corpus.h, token_corpus.h): loading (and a missing
// file), the train/validation split, deterministic random windows with targets shifted by one,
// the fixed evaluation windows, and the Bible from Debian's bible-kjv (skipped where the program
// is not installed).
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <string_view>

#include "engine/core/error.h"
#include "engine/core/random.h"
#include "engine/data/text_corpus.h"
#include "temp_dir.h"

using namespace pt;

namespace {

// 1000 random lower-case letters: any 8 of them in a row occur once (26^8 >> 1000), so
// text.find(window) tells where a window came from.
std::string sample_text() {
  CounterRng rng(42);
  std::string s;
  for (int i = 0; i < 1000; ++i) s += static_cast<char>('a' + rng.next_below(26));
  return s;
}

std::filesystem::path write_text(const std::filesystem::path& dir, const std::string& text) {
  const auto path = dir / "corpus.txt";
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// The text's bytes as a corpus.
TokenCorpus corpus_of(std::string_view text, std::string source) {
  return byte_corpus({reinterpret_cast<const uint8_t*>(text.data()), text.size()},
                     std::move(source));
}

// The corpus's tokens as text (every token a byte).
std::string text_of(const TokenCorpus& c) {
  std::string s;
  for (const uint16_t id : c.tokens()) s += static_cast<char>(id);
  return s;
}

std::string as_text(const std::vector<int32_t>& ids, size_t first, size_t n) {
  std::string s;
  for (size_t i = first; i < first + n; ++i) s += static_cast<char>(ids[i]);
  return s;
}

}  // namespace

TEST_CASE("load_text_corpus refuses a FIFO or a folder before opening it (no hang)") {
  test::TempDir dir("pipetrain-text");
  const std::filesystem::path fifo = dir.path / "pipe";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(load_text_corpus(fifo), doctest::Contains("it is a FIFO (named pipe)"),
                       FileError);
  CHECK_THROWS_WITH_AS(load_text_corpus(dir.path), doctest::Contains("it is a folder"), FileError);
}

TEST_CASE("load_text_corpus reads bytes; a missing or empty file is a FileError") {
  test::TempDir dir("pipetrain-text");
  const std::string text = sample_text();
  const TokenCorpus c = load_text_corpus(write_text(dir.path, text));
  CHECK(c.size() == 1000);
  CHECK(text_of(c) == text);
  CHECK(c.vocab() == 256);
  CHECK(padded_vocab(c.vocab()) == 256);  // the byte-level model's shape is unchanged

  const auto missing = dir.path / "nope.txt";
  CHECK_THROWS_AS(load_text_corpus(missing), FileError);
  try {
    load_text_corpus(missing);
  } catch (const FileError& e) {
    CHECK(std::string(e.what()).find("nope.txt") != std::string::npos);
    CHECK(std::string(e.what()).find("No such file") != std::string::npos);
  }
  std::ofstream(dir.path / "empty.txt").flush();
  CHECK_THROWS_WITH_AS(load_text_corpus(dir.path / "empty.txt"), doctest::Contains("is empty"),
                       FileError);
}

TEST_CASE("sample_batch: deterministic for (seed, step), targets are inputs shifted by one") {
  const std::string text = sample_text();
  const TokenCorpus c = corpus_of(text, "sample");
  const int64_t B = 6, T = 16;
  const TokenBatch a = c.sample_batch(B, T, 5, 3);
  const TokenBatch b = c.sample_batch(B, T, 5, 3);
  CHECK(a.input_ids == b.input_ids);
  CHECK(a.target_ids == b.target_ids);
  CHECK(a.inputs().shape() == Shape{B, T});
  CHECK(a.targets().shape() == Shape{B, T});
  CHECK(a.inputs().dtype() == DType::i32);
  CHECK(c.sample_batch(B, T, 5, 4).input_ids != a.input_ids);  // another step
  CHECK(c.sample_batch(B, T, 6, 3).input_ids != a.input_ids);  // another seed
  for (int64_t r = 0; r < B; ++r) {
    const auto row = static_cast<size_t>(r * T);
    // The window is a piece of the text, and the targets are the next bytes.
    const std::string in = as_text(a.input_ids, row, T);
    const size_t at = text.find(in);
    REQUIRE(at != std::string::npos);
    CHECK(as_text(a.target_ids, row, T) == text.substr(at + 1, T));
  }
  // Every start position is possible, including the last one (targets end at the last byte).
  const TokenCorpus tiny = corpus_of("abcd", "tiny");
  std::set<int32_t> firsts;
  for (int64_t s = 0; s < 200; ++s) firsts.insert(tiny.sample_batch(1, 3, 1, s).input_ids[0]);
  CHECK(firsts == std::set<int32_t>{'a'});
  std::set<int32_t> seen;
  for (int64_t s = 0; s < 200; ++s) seen.insert(tiny.sample_batch(1, 2, 1, s).input_ids[0]);
  CHECK(seen == std::set<int32_t>{'a', 'b'});
  CHECK_THROWS_WITH_AS(tiny.sample_batch(1, 4, 1, 0), doctest::Contains("needs 5"), UsageError);
  CHECK_THROWS_AS(tiny.sample_batch(0, 2, 1, 0), UsageError);
}

TEST_CASE("split: a contiguous validation tail, disjoint from training") {
  const std::string text = sample_text();
  const TokenCorpus c = corpus_of(text, "sample");
  const TokenCorpus::Split s = c.split(0.1);
  CHECK(s.train.size() == 900);
  CHECK(s.validation.size() == 100);
  CHECK(text_of(s.validation) == text.substr(900));
  CHECK(text_of(s.train) == text.substr(0, 900));
  CHECK(s.validation.vocab() == 256);
  // No training window reaches into the validation bytes: all its windows lie in [0, 900).
  for (int64_t step = 0; step < 50; ++step) {
    const TokenBatch b = s.train.sample_batch(4, 8, 1, step);
    for (size_t r = 0; r < 4; ++r) {
      const std::string in = as_text(b.input_ids, r * 8, 8);
      const size_t at = text.find(in);
      REQUIRE(at != std::string::npos);
      CHECK(at + 8 < 900);  // the last target too
    }
  }
  CHECK_THROWS_AS(c.split(0.0), UsageError);
  CHECK_THROWS_AS(c.split(1.0), UsageError);
  CHECK_THROWS_AS(corpus_of("abc", "short").split(0.5), UsageError);
}

TEST_CASE("evaluation windows: fixed, non-overlapping, all or spread evenly") {
  const std::string text = sample_text();
  const TokenCorpus c = corpus_of(text, "sample");
  CHECK(c.window_count(10) == 99);  // (1000 - 1) / 10: the 100th window's last target is missing
  const TokenBatch w = c.windows(2, 3, 10);
  CHECK(w.batch == 3);
  CHECK(as_text(w.input_ids, 0, 10) == text.substr(20, 10));
  CHECK(as_text(w.target_ids, 20, 10) == text.substr(41, 10));
  CHECK_THROWS_AS(c.windows(98, 2, 10), UsageError);

  WindowIterator all(c, 16, 10);
  CHECK(all.windows() == 99);
  CHECK(all.tokens() == 990);
  int64_t batches = 0, windows = 0;
  TokenBatch b;
  while (all.next(b)) {
    ++batches;
    windows += b.batch;
    if (batches == 1) CHECK(b.input_ids == c.windows(0, 16, 10).input_ids);
  }
  CHECK(batches == 7);  // 6 x 16 + 3
  CHECK(windows == 99);

  WindowIterator some(c, 4, 10, 10);  // 10 of 99: every 9th window
  CHECK(some.windows() == 10);
  std::vector<int32_t> firsts;
  while (some.next(b))
    for (int64_t r = 0; r < b.batch; ++r)
      firsts.push_back(b.input_ids[static_cast<size_t>(r * 10)]);
  REQUIRE(firsts.size() == 10);
  for (size_t k = 0; k < 10; ++k) CHECK(firsts[k] == static_cast<uint8_t>(text[k * 9 * 10]));

  const TokenCorpus tiny = corpus_of("ab", "tiny");
  CHECK_THROWS_WITH_AS(WindowIterator(tiny, 1, 4), doctest::Contains("no evaluation window"),
                       UsageError);
}

TEST_CASE("bible_corpus: a clear error naming the package when the program is missing") {
  test::TempDir dir("pipetrain-bible");
  CHECK_THROWS_WITH_AS(bible_corpus(dir.path, "pipetrain-no-such-bible-program"),
                       doctest::Contains("bible-kjv"), FileError);
}

TEST_CASE("bible_corpus: the whole King James Bible, cached after the first run") {
  if (::access("/usr/bin/bible", X_OK) != 0) {
    MESSAGE("skipped: /usr/bin/bible is not installed (Debian package bible-kjv)");
    return;
  }
  test::TempDir dir("pipetrain-bible");
  const TokenCorpus c = bible_corpus(dir.path / "cache", "/usr/bin/bible");
  CHECK(c.size() > 4'000'000);
  const std::string head = text_of(c).substr(0, 40);
  CHECK(head == "Ge1:1 In the beginning God created the h");
  const std::filesystem::path cache = dir.path / "cache" / "bible-kjv.cache";
  CHECK(std::filesystem::exists(cache));
  // The second call reads the cache: the same bytes even without the program.
  const TokenCorpus again = bible_corpus(dir.path / "cache", "pipetrain-no-such-bible-program");
  CHECK(text_of(again) == text_of(c));

  // A cache with one byte changed (same size) fails its CRC-32 and is not used: without the
  // program that is an error, with it the text is made again and the cache rewritten.
  {
    std::fstream f(cache, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1000);
    f.put('#');
  }
  CHECK_THROWS_WITH_AS(bible_corpus(dir.path / "cache", "pipetrain-no-such-bible-program"),
                       doctest::Contains("was not found"), FileError);
  CHECK(text_of(bible_corpus(dir.path / "cache", "/usr/bin/bible")) == text_of(c));
  CHECK(text_of(bible_corpus(dir.path / "cache", "pipetrain-no-such-bible-program")) == text_of(c));
  // A truncated cache is not used either.
  std::filesystem::resize_file(cache, std::filesystem::file_size(cache) - 1);
  CHECK_THROWS_AS(bible_corpus(dir.path / "cache", "pipetrain-no-such-bible-program"), FileError);
}

TEST_CASE("bible_corpus: a program that never finishes is stopped after the timeout") {
  test::TempDir dir("pipetrain-bible");
  const std::filesystem::path hung = dir.path / "hung-bible";
  std::ofstream(hung) << "#!/bin/sh\necho 'Ge1:1 In the beginning'\nexec sleep 1000\n";
  std::filesystem::permissions(hung, std::filesystem::perms::owner_all);
  CHECK_THROWS_WITH_AS(bible_corpus(dir.path / "cache", hung.string(), 0.5),
                       doctest::Contains("did not finish within 0.5 s (it printed 23 bytes)"),
                       FileError);
  CHECK_FALSE(std::filesystem::exists(dir.path / "cache"));

  // A program that fails or prints too little is refused, and nothing is cached.
  const std::filesystem::path failing = dir.path / "failing-bible";
  std::ofstream(failing) << "#!/bin/sh\necho oops\nexit 3\n";
  std::filesystem::permissions(failing, std::filesystem::perms::owner_all);
  CHECK_THROWS_WITH_AS(bible_corpus(dir.path / "cache", failing.string()),
                       doctest::Contains("failed (status 3) and printed 5 bytes"), FileError);
  CHECK_FALSE(std::filesystem::exists(dir.path / "cache"));
}
