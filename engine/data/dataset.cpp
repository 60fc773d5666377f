#include "engine/data/dataset.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <string>

#include "engine/core/error.h"
#include "engine/data/idx.h"

namespace pt {
namespace {

constexpr int64_t kSide = 28;
constexpr int32_t kClasses = 10;

// The distributed name ends in .gz; an unpacked copy works too.
std::filesystem::path find_idx(const std::filesystem::path& dir, const std::string& stem) {
  const std::filesystem::path gz = dir / (stem + ".gz");
  const std::filesystem::path plain = dir / stem;
  std::error_code ec;
  if (std::filesystem::exists(gz, ec)) return gz;
  if (std::filesystem::exists(plain, ec)) return plain;
  throw FileError(fmt::format(
      "Fashion-MNIST file {} (or {}) not found: install the Debian package dataset-fashion-mnist "
      "(apt install dataset-fashion-mnist) or pass --data DIR with the IDX files",
      gz.string(), plain.string()));
}

std::string dims_str(const std::vector<int64_t>& dims) {
  return fmt::format("({})", fmt::join(dims, ", "));
}

}  // namespace

Dataset load_fashion_mnist(const std::filesystem::path& dir, bool train) {
  const std::string split = train ? "train" : "t10k";
  const std::filesystem::path images_path = find_idx(dir, split + "-images-idx3-ubyte");
  const std::filesystem::path labels_path = find_idx(dir, split + "-labels-idx1-ubyte");
  const IdxArray images = read_idx(images_path);
  const IdxArray labels = read_idx(labels_path);

  if (images.dims.size() != 3 || images.dims[1] != kSide || images.dims[2] != kSide)
    throw FileError(fmt::format("{}: expected images of shape (N, 28, 28), found {}",
                                images_path.string(), dims_str(images.dims)));
  if (labels.dims.size() != 1)
    throw FileError(fmt::format("{}: expected labels of shape (N), found {}", labels_path.string(),
                                dims_str(labels.dims)));
  const int64_t n = images.dims[0];
  if (labels.dims[0] != n)
    throw FileError(
        fmt::format("{} holds {} images but {} holds {} labels: the files do not "
                    "belong together",
                    images_path.string(), n, labels_path.string(), labels.dims[0]));

  Dataset out;
  out.sample_shape = Shape{1, kSide, kSide};
  out.num_classes = kClasses;
  out.labels.resize(static_cast<size_t>(n));
  for (size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= kClasses)
      throw FileError(fmt::format("{}: label {} of sample {} is not a class 0..9",
                                  labels_path.string(), labels.data[i], i));
    out.labels[i] = labels.data[i];
  }
  // A table per byte value: the same float for the same pixel everywhere, and cheap.
  std::array<float, 256> table;
  for (int v = 0; v < 256; ++v)
    table[static_cast<size_t>(v)] =
        (static_cast<float>(v) / 255.0f - kFashionMnistMean) / kFashionMnistStd;
  out.inputs.resize(images.data.size());
  for (size_t i = 0; i < images.data.size(); ++i) out.inputs[i] = table[images.data[i]];
  return out;
}

}  // namespace pt
