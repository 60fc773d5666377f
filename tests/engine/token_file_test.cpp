// Token files (token_file.h) and the token corpus they fill (token_corpus.h): llm.c's format and
// nanoGPT's raw uint16 one read back exactly, --data-format auto's choice, the vocabulary rules
// (GPT-2's by default for llm.c files, required for raw ones, refused for text) and padding,
// and one clear error for each way a file can be wrong.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/data/text_corpus.h"
#include "engine/data/token_file.h"
#include "temp_dir.h"

using namespace pt;

namespace {

using Bytes = std::vector<unsigned char>;

void put_i32(Bytes& out, int32_t v) {
  const auto u = static_cast<uint32_t>(v);
  for (int k = 0; k < 4; ++k) out.push_back(static_cast<unsigned char>(u >> (8 * k)));
}

void put_tokens(Bytes& out, const std::vector<uint16_t>& tokens) {
  for (const uint16_t t : tokens) {
    out.push_back(static_cast<unsigned char>(t & 0xff));
    out.push_back(static_cast<unsigned char>(t >> 8));
  }
}

// llm.c's layout: 256 int32 (magic, version, count, zeros), then the tokens, little-endian.
Bytes llmc_bytes(const std::vector<uint16_t>& tokens, int32_t magic = kLlmcMagic,
                 int32_t version = kLlmcVersion, std::optional<int32_t> count = std::nullopt) {
  Bytes out;
  put_i32(out, magic);
  put_i32(out, version);
  put_i32(out, count.value_or(static_cast<int32_t>(tokens.size())));
  for (int k = 3; k < 256; ++k) put_i32(out, 0);
  put_tokens(out, tokens);
  return out;
}

std::filesystem::path write(const std::filesystem::path& path, const Bytes& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::vector<uint16_t> tokens_of(const TokenCorpus& c) {
  return {c.tokens().begin(), c.tokens().end()};
}

// 1000 tokens spread over GPT-2's vocabulary, many above 255 (they need both bytes).
std::vector<uint16_t> sample_tokens() {
  std::vector<uint16_t> t;
  for (uint32_t i = 0; i < 1000; ++i)
    t.push_back(static_cast<uint16_t>((i * 7919u + 13u) % 50257u));
  return t;
}

}  // namespace

TEST_CASE("an llm.c token file and a raw uint16 file read back exactly") {
  test::TempDir dir("pipetrain-tokens");
  const std::vector<uint16_t> tokens = sample_tokens();
  const auto llmc = write(dir.path / "train.bin", llmc_bytes(tokens));
  const TokenCorpus a = load_llmc_file(llmc, kGpt2Vocab);
  CHECK(tokens_of(a) == tokens);
  CHECK(a.vocab() == 50257);
  CHECK(a.source() == "llm.c token file '" + llmc.string() + "'");

  Bytes raw_bytes;
  put_tokens(raw_bytes, tokens);
  const auto raw = write(dir.path / "val.bin", raw_bytes);
  const TokenCorpus b = load_uint16_file(raw, 50257);
  CHECK(tokens_of(b) == tokens);
  CHECK(b.source() == "uint16 token file '" + raw.string() + "'");

  // The extreme ids: 0 and 65535 (vocabulary 65536) survive the byte order.
  Bytes edge;
  put_tokens(edge, {0, 65535, 256, 255});
  CHECK(tokens_of(load_uint16_file(write(dir.path / "edge.bin", edge), 65536)) ==
        std::vector<uint16_t>{0, 65535, 256, 255});
}

TEST_CASE("windows of a token corpus hold its ids; the split parts share its tokens") {
  test::TempDir dir("pipetrain-tokens");
  const std::vector<uint16_t> tokens = sample_tokens();
  const TokenCorpus c = load_llmc_file(write(dir.path / "t.bin", llmc_bytes(tokens)), kGpt2Vocab);
  const TokenCorpus::Split s = c.split(0.1);
  CHECK(s.train.size() == 900);
  CHECK(s.validation.size() == 100);
  CHECK(s.validation.vocab() == 50257);
  CHECK(s.validation.tokens().data() == c.tokens().data() + 900);  // a view, not a copy
  CHECK(tokens_of(s.validation) == std::vector<uint16_t>(tokens.begin() + 900, tokens.end()));
  const TokenBatch w = s.validation.windows(1, 2, 10);
  for (size_t i = 0; i < 20; ++i) {
    CHECK(w.input_ids[i] == tokens[900 + 10 + i]);
    CHECK(w.target_ids[i] == tokens[900 + 10 + i + 1]);
  }
  // Random windows: pure functions of (seed, step), every one a piece of the training part.
  const TokenBatch b = s.train.sample_batch(4, 16, 3, 7);
  CHECK(b.input_ids == s.train.sample_batch(4, 16, 3, 7).input_ids);
  for (size_t r = 0; r < 4; ++r) {
    const auto row = b.input_ids.begin() + static_cast<std::ptrdiff_t>(r * 16);
    const auto at = std::search(tokens.begin(), tokens.begin() + 900, row, row + 16,
                                [](uint16_t x, int32_t y) { return x == y; });
    REQUIRE(at != tokens.begin() + 900);
    CHECK(at - tokens.begin() + 16 < 900);  // the last target too
  }
}

TEST_CASE("the model's vocabulary: padded up to a multiple of 128, as llm.c's") {
  CHECK(padded_vocab(50257) == 50304);
  CHECK(padded_vocab(256) == 256);  // bytes: the byte-level model keeps its shape
  CHECK(padded_vocab(1) == 128);
  CHECK(padded_vocab(128) == 128);
  CHECK(padded_vocab(129) == 256);
  CHECK(padded_vocab(65536) == 65536);
}

TEST_CASE("--data-format: the names, and what auto picks") {
  for (const DataFormat f :
       {DataFormat::automatic, DataFormat::text, DataFormat::llmc, DataFormat::uint16})
    CHECK(parse_data_format(data_format_name(f)) == f);
  CHECK_THROWS_WITH_AS(parse_data_format("npy"),
                       doctest::Contains("unknown data format 'npy': use auto"), UsageError);

  test::TempDir dir("pipetrain-tokens");
  const Bytes llmc = llmc_bytes({1, 2, 3});
  CHECK(detect_data_format(write(dir.path / "a.bin", llmc)) == DataFormat::llmc);
  CHECK(detect_data_format(write(dir.path / "a.dat", llmc)) == DataFormat::llmc);  // any name
  Bytes raw;
  put_tokens(raw, {1, 2, 3, 4});
  CHECK(detect_data_format(write(dir.path / "b.bin", raw)) == DataFormat::uint16);
  CHECK(detect_data_format(write(dir.path / "b.txt", raw)) == DataFormat::text);
  CHECK(detect_data_format(write(dir.path / "c.bin", {1})) == DataFormat::uint16);  // < 4 bytes
  // Missing files are not read: the name decides, and the loader says it is missing.
  CHECK(detect_data_format(dir.path / "missing.bin") == DataFormat::uint16);
  CHECK(detect_data_format(dir.path / "missing.txt") == DataFormat::text);
  // llm.c's uint32 files go to its reader, which refuses them by name.
  const auto llama = write(dir.path / "llama.bin", llmc_bytes({1, 2}, 20240801, 7));
  CHECK(detect_data_format(llama) == DataFormat::llmc);
  CHECK_THROWS_WITH_AS(load_corpus(llama, DataFormat::automatic, std::nullopt),
                       doctest::Contains("llm.c's for uint32 tokens (Llama 3, version 7)"),
                       FileError);
}

TEST_CASE("--vocab: GPT-2's by default for llm.c files, required for raw ones, refused for text") {
  test::TempDir dir("pipetrain-tokens");
  const auto llmc = write(dir.path / "t.bin", llmc_bytes({10, 50256, 7}));
  CHECK(load_corpus(llmc, DataFormat::automatic, std::nullopt).vocab() == 50257);
  CHECK(load_corpus(llmc, DataFormat::llmc, 60000).vocab() == 60000);
  Bytes raw;
  put_tokens(raw, {1, 64, 2, 3});
  const auto raw_file = write(dir.path / "chars.bin", raw);
  CHECK_THROWS_WITH_AS(load_corpus(raw_file, DataFormat::automatic, std::nullopt),
                       doctest::Contains("which do not say their vocabulary: pass --vocab"),
                       UsageError);
  CHECK(load_corpus(raw_file, DataFormat::automatic, 65).vocab() == 65);
  const auto text = write(dir.path / "t.txt", {'a', 'b', 'c', 'd'});
  const TokenCorpus t = load_corpus(text, DataFormat::automatic, std::nullopt);
  CHECK(t.vocab() == 256);
  CHECK(t.source() == "file '" + text.string() + "'");  // as before token files existed
  CHECK_THROWS_WITH_AS(load_corpus(text, DataFormat::automatic, 50257),
                       doctest::Contains("--vocab 50257 applies to token files"), UsageError);
  // A raw file read as text (--data-format text) is bytes.
  CHECK(load_corpus(raw_file, DataFormat::text, std::nullopt).size() == 8);
  CHECK(data_vocab(text, DataFormat::text, std::nullopt) == 256);
  CHECK(data_vocab(llmc, DataFormat::llmc, std::nullopt) == 50257);
}

TEST_CASE("a token outside the vocabulary: its position and value") {
  test::TempDir dir("pipetrain-tokens");
  const auto f = write(dir.path / "t.bin", llmc_bytes({5, 64, 50257, 60000}));
  CHECK_THROWS_WITH_AS(load_llmc_file(f, 50257),
                       doctest::Contains("holds token 50257 at position 2 (counting from 0), "
                                         "outside the vocabulary [0, 50257)"),
                       UsageError);
  Bytes raw;
  put_tokens(raw, {1, 2, 65});
  CHECK_THROWS_WITH_AS(load_uint16_file(write(dir.path / "r.bin", raw), 65),
                       doctest::Contains(("uint16 token file '" + (dir.path / "r.bin").string() +
                                          "' holds token 65 at position 2")
                                             .c_str()),
                       UsageError);
  CHECK_THROWS_WITH_AS(TokenCorpus({1, 2}, 0, "x"), doctest::Contains("between 1 and 65536"),
                       UsageError);
  CHECK_THROWS_AS(TokenCorpus({1, 2}, 65537, "x"), UsageError);
}

TEST_CASE("a wrong llm.c file: one FileError naming the file and what is wrong") {
  test::TempDir dir("pipetrain-tokens");
  const std::vector<uint16_t> tokens{1, 2, 3, 4, 5};
  const auto path = dir.path / "bad.bin";
  const auto fails = [&](const Bytes& bytes, const std::string& what) {
    write(path, bytes);
    CHECK_THROWS_WITH_AS(load_llmc_file(path, kGpt2Vocab),
                         doctest::Contains(("token file '" + path.string() + "': " + what).c_str()),
                         FileError);
  };
  fails(llmc_bytes(tokens, 20240521),
        "its first int32 is 20240521, not llm.c's magic 20240520: not an llm.c token file; if it "
        "holds raw uint16 tokens (nanoGPT's .bin), pass --data-format uint16");
  fails(llmc_bytes(tokens, kLlmcMagic, 2), "llm.c header version 2; only version 1");
  Bytes truncated = llmc_bytes(tokens);
  truncated.pop_back();
  fails(truncated,
        "its header counts 5 tokens (1034 bytes with the header) but the file has 1033 bytes: "
        "it is truncated");
  fails(llmc_bytes(tokens, kLlmcMagic, kLlmcVersion, 4),
        "its header counts 4 tokens (1032 bytes with the header) but the file has 1034 bytes: "
        "bytes follow its tokens");
  fails(llmc_bytes({}), "its header counts 0 tokens; a token file needs at least one");
  fails(llmc_bytes(tokens, kLlmcMagic, kLlmcVersion, -3), "its header counts -3 tokens");
  fails(Bytes(100, 0), "it has 100 bytes, too few for llm.c's header of 1024");
  fails({}, "it is empty");
}

TEST_CASE("a wrong raw file, a missing file, a FIFO or a folder: a FileError, never a hang") {
  test::TempDir dir("pipetrain-tokens");
  const auto odd = write(dir.path / "odd.bin", {1, 0, 2});
  CHECK_THROWS_WITH_AS(load_uint16_file(odd, 256),
                       doctest::Contains("it has 3 bytes, an odd number: not whole uint16 tokens"),
                       FileError);
  CHECK_THROWS_WITH_AS(load_uint16_file(write(dir.path / "empty.bin", {}), 256),
                       doctest::Contains("it is empty"), FileError);
  CHECK_THROWS_WITH_AS(load_uint16_file(dir.path / "missing.bin", 256),
                       doctest::Contains("cannot open it: No such file or directory"), FileError);
  const auto fifo = dir.path / "pipe.bin";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(load_uint16_file(fifo, 256),
                       doctest::Contains("it is a FIFO (named pipe), not a regular file"),
                       FileError);
  CHECK_THROWS_WITH_AS(load_llmc_file(fifo, 256), doctest::Contains("it is a FIFO"), FileError);
  CHECK(detect_data_format(fifo) == DataFormat::uint16);  // not opened: the name decides
  CHECK_THROWS_WITH_AS(load_llmc_file(dir.path, 256), doctest::Contains("it is a folder"),
                       FileError);
}

TEST_CASE("too few tokens for one window: the corpus says so, counting tokens") {
  test::TempDir dir("pipetrain-tokens");
  const TokenCorpus c = load_llmc_file(
      write(dir.path / "few.bin", llmc_bytes({1, 2, 3, 4, 5, 6, 7, 8, 9, 10})), kGpt2Vocab);
  const TokenCorpus::Split s = c.split(0.2);
  CHECK_THROWS_WITH_AS(s.train.sample_batch(1, 8, 0, 0),
                       doctest::Contains("(training part) has 8 tokens but a window of context "
                                         "8 needs 9"),
                       UsageError);
  CHECK_THROWS_WITH_AS(WindowIterator(s.validation, 1, 4),
                       doctest::Contains("(validation part) has 2 tokens: no evaluation window "
                                         "of context 4 fits"),
                       UsageError);
  CHECK_THROWS_WITH_AS(
      load_llmc_file(write(dir.path / "one.bin", llmc_bytes({1})), kGpt2Vocab).split(0.5),
      doctest::Contains("has 1 tokens: too few to split"), UsageError);
}
