// safetensors: round trips, the exact byte layout other tools expect, and a clear FileError
// for every kind of damage.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/io/safetensors.h"
#include "temp_dir.h"

using namespace pt;
namespace fs = std::filesystem;

namespace {

struct TempDir : test::TempDir {
  TempDir() : test::TempDir("pipetrain-st") {}
  size_t count() const {
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(path)) ++n;
    return n;
  }
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spit(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

uint64_t read_le64(const std::string& s) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[static_cast<size_t>(i)]);
  return v;
}

// A file made by hand: header JSON (padded as the format asks) and a data buffer.
std::string raw_file(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return le64(header.size()) + header + data;
}

HostTensor raw_tensor(std::string name, DType dtype, Shape shape, std::vector<uint8_t> bytes) {
  HostTensor t{std::move(name), dtype, shape, {}};
  for (uint8_t b : bytes) t.data.push_back(static_cast<std::byte>(b));
  return t;
}

SafetensorsFile sample_file() {
  SafetensorsFile f;
  const std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
  const std::vector<int32_t> ids = {1, -2, 3, 2147483647};
  f.tensors.push_back(HostTensor::from_f32("layers.0.weight", Shape{2, 3}, w));
  f.tensors.push_back(HostTensor::from_i32("ids", Shape{4}, ids));
  f.tensors.push_back(
      raw_tensor("half", DType::f16, Shape{3}, {0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b}));
  f.tensors.push_back(raw_tensor("brain", DType::bf16, Shape{1, 1}, {0x80, 0x3f}));
  f.tensors.push_back(raw_tensor("scalar", DType::f32, Shape{}, {0, 0, 0x80, 0x3f}));
  f.tensors.push_back(raw_tensor("empty", DType::f32, Shape{0, 5}, {}));
  f.metadata = {{"format", "pt"}, {"step", "1200"}, {"note", "ünïcode ok"}};
  return f;
}

// The FileError message from loading `bytes` (fails the test if loading succeeds).
std::string load_error(const TempDir& dir, const std::string& bytes) {
  const fs::path p = dir.path / "bad.safetensors";
  spit(p, bytes);
  try {
    load_safetensors(p);
  } catch (const FileError& e) {
    const std::string msg = e.what();
    CHECK(msg.find(p.string()) != std::string::npos);  // every message names the file
    return msg;
  }
  FAIL("expected FileError for a damaged file");
  return {};
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("safetensors round trip keeps names, order, dtypes, shapes, bytes and metadata") {
  TempDir dir;
  const fs::path p = dir.path / "a.safetensors";
  const SafetensorsFile in = sample_file();
  save_safetensors(p, in);
  CHECK(dir.count() == 1);  // no temporary left behind
  const SafetensorsFile out = load_safetensors(p);
  REQUIRE(out.tensors.size() == in.tensors.size());
  for (size_t i = 0; i < in.tensors.size(); ++i) {
    CAPTURE(in.tensors[i].name);
    CHECK(out.tensors[i].name == in.tensors[i].name);
    CHECK(out.tensors[i].dtype == in.tensors[i].dtype);
    CHECK(out.tensors[i].shape == in.tensors[i].shape);
    CHECK(out.tensors[i].data == in.tensors[i].data);
  }
  CHECK(out.metadata == in.metadata);
  REQUIRE(out.find("ids") != nullptr);
  CHECK(out.find("ids")->to_i32() == std::vector<int32_t>{1, -2, 3, 2147483647});
  CHECK(out.find("layers.0.weight")->to_f32()[4] == 1e-30f);
  CHECK(out.find("nope") == nullptr);
  CHECK_THROWS_AS(out.find("ids")->to_f32(), UsageError);
}

TEST_CASE("safetensors layout is byte for byte the reference format") {
  TempDir dir;
  const fs::path p = dir.path / "x.safetensors";
  SafetensorsFile f;
  const std::vector<float> v = {1.0f, 2.0f};
  f.tensors.push_back(HostTensor::from_f32("x", Shape{2}, v));
  save_safetensors(p, f);
  const std::string bytes = slurp(p);
  // Exactly what huggingface/safetensors writes for {"x": [1., 2.]} (no metadata): compact JSON,
  // fields in the order dtype, shape, data_offsets, padded with two spaces to 56 bytes.
  const std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  REQUIRE(header.size() == 54);
  std::string expect = le64(56) + header + "  ";
  expect.append("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);
  CHECK(bytes == expect);

  SUBCASE("several tensors and metadata: aligned header, contiguous offsets in the given order") {
    save_safetensors(p, sample_file());
    const std::string b = slurp(p);
    const uint64_t n = read_le64(b);
    CHECK(n % 8 == 0);
    CHECK(b[8] == '{');
    const std::string h = b.substr(8, n);
    CHECK(h.find_last_not_of(' ') == h.rfind('}'));  // padding is spaces only
    CHECK(h.rfind(R"({"__metadata__":{"format":"pt","note":"ünïcode ok","step":"1200"},)", 0) == 0);
    CHECK(contains(h, R"("layers.0.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})"));
    CHECK(contains(h, R"("ids":{"dtype":"I32","shape":[4],"data_offsets":[24,40]})"));
    CHECK(contains(h, R"("half":{"dtype":"F16","shape":[3],"data_offsets":[40,46]})"));
    CHECK(contains(h, R"("brain":{"dtype":"BF16","shape":[1,1],"data_offsets":[46,48]})"));
    CHECK(contains(h, R"("scalar":{"dtype":"F32","shape":[],"data_offsets":[48,52]})"));
    CHECK(contains(h, R"("empty":{"dtype":"F32","shape":[0,5],"data_offsets":[52,52]})"));
    CHECK(h.find("layers.0.weight") < h.find("\"ids\""));
    CHECK(b.size() == 8 + n + 52);
    float first;
    std::memcpy(&first, b.data() + 8 + n, 4);
    CHECK(first == 1.5f);
  }
  SUBCASE("empty metadata is omitted, and an empty file is valid") {
    save_safetensors(p, SafetensorsFile{});
    CHECK(slurp(p) == le64(8) + "{}      ");
    const SafetensorsFile back = load_safetensors(p);
    CHECK(back.tensors.empty());
    CHECK(back.metadata.empty());
  }
}

TEST_CASE("safetensors reads files written by other tools: any key order, extra spaces") {
  TempDir dir;
  // Keys out of data order, metadata last, whitespace inside: all allowed by the format.
  const std::string h = R"({ "b": {"shape": [1], "dtype": "I32", "data_offsets": [4, 8]},
      "a": {"data_offsets": [0, 4], "dtype": "F32", "shape": [1]}, "__metadata__": {} })";
  const std::string data("\x00\x00\x80\x3f\x07\x00\x00\x00", 8);
  const fs::path p = dir.path / "other.safetensors";
  spit(p, raw_file(h, data));
  const SafetensorsFile f = load_safetensors(p);
  REQUIRE(f.tensors.size() == 2);
  CHECK(f.tensors[0].name == "a");  // in data-buffer order
  CHECK(f.tensors[0].to_f32() == std::vector<float>{1.0f});
  CHECK(f.tensors[1].to_i32() == std::vector<int32_t>{7});
}

TEST_CASE("save_safetensors refuses what the format cannot hold, writing nothing") {
  TempDir dir;
  const fs::path p = dir.path / "x.safetensors";
  const std::vector<float> v = {1, 2};
  SafetensorsFile dup;
  dup.tensors = {HostTensor::from_f32("w", Shape{2}, v), HostTensor::from_f32("w", Shape{2}, v)};
  CHECK_THROWS_WITH_AS(save_safetensors(p, dup), doctest::Contains("two tensors are named 'w'"),
                       UsageError);
  SafetensorsFile wrong_size;
  wrong_size.tensors = {HostTensor::from_f32("w", Shape{2}, v)};
  wrong_size.tensors[0].shape = Shape{3};
  CHECK_THROWS_WITH_AS(save_safetensors(p, wrong_size),
                       doctest::Contains("needs 12 bytes but holds 8"), UsageError);
  SafetensorsFile reserved;
  reserved.tensors = {HostTensor::from_f32("__metadata__", Shape{2}, v)};
  CHECK_THROWS_AS(save_safetensors(p, reserved), UsageError);
  SafetensorsFile bad_utf8;
  bad_utf8.metadata["k"] = "\xff\xfe";
  CHECK_THROWS_WITH_AS(save_safetensors(p, bad_utf8), doctest::Contains("UTF-8"), UsageError);
  CHECK_THROWS_AS(HostTensor::from_f32("w", Shape{3}, v), UsageError);
  CHECK(dir.count() == 0);
}

TEST_CASE("load_safetensors: truncated files") {
  TempDir dir;
  const fs::path good = dir.path / "good.safetensors";
  save_safetensors(good, sample_file());
  const std::string bytes = slurp(good);
  const uint64_t n = read_le64(bytes);

  for (size_t cut : {size_t{0}, size_t{4}, size_t{7}}) {
    CAPTURE(cut);
    CHECK(contains(load_error(dir, bytes.substr(0, cut)), "smaller than the 8-byte header length"));
  }
  for (size_t cut : {size_t{8}, size_t{20}, static_cast<size_t>(8 + n - 1)}) {
    CAPTURE(cut);
    const std::string msg = load_error(dir, bytes.substr(0, cut));
    CHECK(contains(
        msg, "header length " + std::to_string(n) + " exceeds file size " + std::to_string(cut)));
    CHECK(contains(msg, "truncated or not safetensors"));
  }
  // Cut inside the data: the last non-empty tensor ("scalar", [48, 52)) reaches past the end.
  for (size_t keep : {size_t{0}, size_t{30}, size_t{51}}) {
    CAPTURE(keep);
    const std::string msg = load_error(dir, bytes.substr(0, 8 + n + keep));
    CHECK(contains(msg, "reach past the data buffer of " + std::to_string(keep) + " bytes"));
  }
  CHECK(contains(load_error(dir, bytes + "extra"), "trailing bytes"));
}

TEST_CASE("load_safetensors: corrupt headers") {
  TempDir dir;
  const std::string four("\x00\x00\x80\x3f", 4);
  auto tensor = [](const std::string& name, const std::string& dtype, const std::string& shape,
                   int begin, int end) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
           ",\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
  };

  SUBCASE("header length flipped to a huge value") {
    const std::string ok = raw_file("{" + tensor("a", "F32", "[1]", 0, 4) + "}", four);
    CHECK(contains(load_error(dir, le64(9999999) + ok.substr(8)),
                   "header length 9999999 exceeds file size " + std::to_string(ok.size())));
    CHECK(contains(load_error(dir, le64(~uint64_t{0}) + ok.substr(8)), "exceeds file size"));
    // A header over the reference's 100 MB limit, in a sparse file (no 100 MB written).
    const fs::path big = dir.path / "big.safetensors";
    spit(big, le64(100'000'008) + "{");
    fs::resize_file(big, 8 + 100'000'008);
    CHECK_THROWS_WITH_AS(load_safetensors(big),
                         doctest::Contains("exceeds the limit of 100000000 bytes"), FileError);
  }
  SUBCASE("not JSON, or not an object") {
    CHECK(contains(load_error(dir, raw_file("{\"a\": [1, 2", "")), "header is not valid JSON"));
    CHECK(contains(load_error(dir, raw_file("{\"a\": garbage}", "")), "header is not valid JSON"));
    CHECK(contains(load_error(dir, raw_file("[1, 2, 3]", "")), "does not start with '{'"));
    CHECK(contains(load_error(dir, raw_file("", "")), "does not start with '{'"));
    CHECK(contains(load_error(dir, raw_file("{\"a\": 5}", "")),
                   "tensor 'a': header entry is number"));
  }
  SUBCASE("unsupported or unknown dtype") {
    CHECK(contains(
        load_error(dir, raw_file("{" + tensor("a", "F64", "[1]", 0, 8) + "}", four + four)),
        "tensor 'a': dtype \"F64\" is not supported (pipetrain reads F32, BF16, F16 and I32)"));
    CHECK(contains(load_error(dir, raw_file("{" + tensor("a", "Q4", "[1]", 0, 4) + "}", four)),
                   "dtype \"Q4\" is not supported"));
  }
  SUBCASE("shape and offsets disagree") {
    CHECK(contains(load_error(dir, raw_file("{" + tensor("a", "F32", "[3]", 0, 4) + "}", four)),
                   "data_offsets [0, 4] span 4 bytes, but shape (3) of F32 needs 12"));
    CHECK(contains(load_error(dir, raw_file("{" + tensor("a", "F32", "[1]", 4, 0) + "}", four)),
                   "end before they begin"));
    CHECK(contains(load_error(dir, raw_file("{" + tensor("a", "F32", "[-1]", 0, 4) + "}", four)),
                   "not a non-negative integer"));
    CHECK(contains(
        load_error(dir, raw_file("{" + tensor("a", "F32", "[1,1,1,1,1,1,1]", 0, 4) + "}", four)),
        "rank 7"));
    CHECK(contains(
        load_error(dir, raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", four)),
        "is not a pair of non-negative integers"));
    CHECK(contains(load_error(dir, raw_file(R"({"a":{"dtype":"F32","shape":[1]}})", four)),
                   "has no \"data_offsets\""));
    CHECK(contains(
        load_error(dir,
                   raw_file("{" + tensor("a", "F32", "[4611686018427387904,4]", 0, 4) + "}", four)),
        "is too large"));
  }
  SUBCASE("offsets out of range, overlapping, with gaps; duplicate names") {
    CHECK(contains(load_error(dir, raw_file("{" + tensor("a", "F32", "[1]", 4, 8) + "}", four)),
                   "tensor 'a': data_offsets [4, 8] reach past the data buffer of 4 bytes"));
    const std::string twelve = four + four + four;
    CHECK(contains(load_error(dir, raw_file("{" + tensor("a", "F32", "[2]", 0, 8) + "," +
                                                tensor("b", "F32", "[2]", 4, 12) + "}",
                                            twelve)),
                   "tensors 'a' [0, 8) and 'b' [4, 12) overlap"));
    CHECK(contains(load_error(dir, raw_file("{" + tensor("a", "F32", "[1]", 0, 4) + "," +
                                                tensor("b", "F32", "[1]", 8, 12) + "}",
                                            twelve)),
                   "bytes [4, 8) of the data buffer belong to no tensor"));
    CHECK(contains(load_error(dir, raw_file("{" + tensor("a", "F32", "[1]", 0, 4) + "," +
                                                tensor("a", "F32", "[1]", 4, 8) + "}",
                                            four + four)),
                   "header names 'a' twice"));
  }
  SUBCASE("metadata that is not a map of strings") {
    CHECK(contains(load_error(dir, raw_file(R"({"__metadata__":{"step":12}})", "")),
                   "\"__metadata__\" value of \"step\" is number, expected a string"));
    CHECK(contains(load_error(dir, raw_file(R"({"__metadata__":[1]})", "")),
                   "expected an object of strings"));
  }
}

TEST_CASE("load_safetensors: missing file") {
  TempDir dir;
  const fs::path p = dir.path / "nothing.safetensors";
  CHECK_THROWS_WITH_AS(load_safetensors(p), doctest::Contains("No such file or directory"),
                       FileError);
}
