// Fashion-MNIST loading: a tiny generated copy in a temp dir, and the real files when installed.
#include <doctest/doctest.h>
#include <stdlib.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/data/dataset.h"
#include "temp_dir.h"

using namespace pt;
namespace fs = std::filesystem;

namespace {

struct TempDir : test::TempDir {
  TempDir() : test::TempDir("pipetrain-ds") {}
};

std::string idx_bytes(const std::vector<uint32_t>& dims, const std::string& data) {
  std::string s = {'\0', '\0', '\x08', static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8)
      s.push_back(static_cast<char>((d >> shift) & 0xFF));
  return s + data;
}

void write_gz(const fs::path& p, const std::string& bytes) {
  gzFile f = gzopen(p.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) ==
          static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

// n images whose pixel p of image i is (i * 784 + p) % 256, labels i % 10.
void write_fake_split(const fs::path& dir, const std::string& split, uint32_t n_images,
                      uint32_t n_labels, uint32_t side = 28) {
  std::string pixels(size_t{n_images} * side * side, '\0');
  for (size_t k = 0; k < pixels.size(); ++k) pixels[k] = static_cast<char>(k % 256);
  std::string labels(n_labels, '\0');
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<char>(i % 10);
  write_gz(dir / (split + "-images-idx3-ubyte.gz"), idx_bytes({n_images, side, side}, pixels));
  write_gz(dir / (split + "-labels-idx1-ubyte.gz"), idx_bytes({n_labels}, labels));
}

float normalised(int pixel) { return (static_cast<float>(pixel) / 255.0f - 0.2860f) / 0.3530f; }

}  // namespace

TEST_CASE("load_fashion_mnist on a small generated copy") {
  TempDir dir;
  write_fake_split(dir.path, "train", 3, 3);
  write_fake_split(dir.path, "t10k", 2, 2);
  const Dataset train = load_fashion_mnist(dir.path, true);
  CHECK(train.size() == 3);
  CHECK(train.sample_shape == Shape{1, 28, 28});
  CHECK(train.num_classes == 10);
  REQUIRE(train.inputs.size() == 3 * 784);
  CHECK(train.labels == std::vector<int32_t>{0, 1, 2});
  CHECK(train.inputs[0] == normalised(0));
  CHECK(train.inputs[255] == normalised(255));
  CHECK(train.inputs[784 + 1] == normalised((784 + 1) % 256));
  CHECK(normalised(0) == doctest::Approx(-0.8102).epsilon(1e-3));
  CHECK(normalised(255) == doctest::Approx(2.0227).epsilon(1e-3));
  CHECK(load_fashion_mnist(dir.path, false).size() == 2);

  SUBCASE("unzipped files work too") {
    fs::path plain = dir.path / "plain";
    fs::create_directory(plain);
    for (const char* stem : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte"}) {
      gzFile f = gzopen((dir.path / (std::string(stem) + ".gz")).c_str(), "rb");
      std::string bytes(1 << 16, '\0');
      const int n = gzread(f, bytes.data(), static_cast<unsigned>(bytes.size()));
      gzclose(f);
      std::ofstream(plain / stem, std::ios::binary).write(bytes.data(), n);
    }
    CHECK(load_fashion_mnist(plain, true).inputs == train.inputs);
  }
}

TEST_CASE("load_fashion_mnist: missing and inconsistent files") {
  TempDir dir;
  try {
    load_fashion_mnist(dir.path / "nowhere", true);
    FAIL("expected FileError");
  } catch (const FileError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("train-images-idx3-ubyte.gz") != std::string::npos);
    CHECK(msg.find("install the Debian package dataset-fashion-mnist") != std::string::npos);
    CHECK(msg.find("--data DIR") != std::string::npos);
  }
  write_fake_split(dir.path, "train", 3, 4);
  CHECK_THROWS_WITH_AS(load_fashion_mnist(dir.path, true), doctest::Contains("holds 3 images but"),
                       FileError);
  write_fake_split(dir.path, "train", 3, 3, 27);
  CHECK_THROWS_WITH_AS(load_fashion_mnist(dir.path, true),
                       doctest::Contains("expected images of shape (N, 28, 28), found (3, 27, 27)"),
                       FileError);
  write_fake_split(dir.path, "train", 1, 1);
  write_gz(dir.path / "train-labels-idx1-ubyte.gz", idx_bytes({1}, "\x0a"));
  CHECK_THROWS_WITH_AS(load_fashion_mnist(dir.path, true),
                       doctest::Contains("label 10 of sample 0 is not a class 0..9"), FileError);
}

TEST_CASE("the real Fashion-MNIST, when installed") {
  if (!fs::exists(fs::path(kFashionMnistDir) / "train-images-idx3-ubyte.gz")) {
    MESSAGE("skipped: " << kFashionMnistDir << " not present (package dataset-fashion-mnist)");
    return;
  }
  const Dataset train = load_fashion_mnist();
  const Dataset test = load_fashion_mnist(kFashionMnistDir, false);
  CHECK(train.size() == 60000);
  CHECK(test.size() == 10000);
  CHECK(train.inputs.size() == size_t{60000} * 784);
  // Balanced classes: 6,000 of each in train, 1,000 in test.
  std::vector<int> counts(10, 0);
  for (int32_t l : train.labels) ++counts[static_cast<size_t>(l)];
  CHECK(counts == std::vector<int>(10, 6000));
  // Normalised with the training set's own statistics: mean ≈ 0, std ≈ 1.
  double sum = 0, sq = 0;
  for (float x : train.inputs) {
    sum += x;
    sq += double{x} * x;
  }
  const double mean = sum / static_cast<double>(train.inputs.size());
  const double std = std::sqrt(sq / static_cast<double>(train.inputs.size()) - mean * mean);
  CHECK(std::abs(mean) < 0.01);
  CHECK(std::abs(std - 1.0) < 0.01);
}
