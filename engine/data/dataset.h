#pragma once
// An in-memory labelled dataset (inputs already as normalised floats) and the Fashion-MNIST
// loader. Fashion-MNIST is 70,000 28×28 grey images of clothes in 10 classes; Debian ships it as
// gzipped IDX files in the package dataset-fashion-mnist.
#include <cstdint>
#include <filesystem>
#include <vector>

#include "engine/core/shape.h"

namespace pt {

struct Dataset {
  Shape sample_shape;           // one input, e.g. (1, 28, 28)
  std::vector<float> inputs;    // (N, ...sample_shape), row-major
  std::vector<int32_t> labels;  // (N), class indices in [0, num_classes)
  int32_t num_classes = 0;

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  int64_t sample_numel() const { return sample_shape.numel(); }
};

// Where the Debian package puts the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Fashion-MNIST's per-pixel statistics over the training set (pixels scaled to [0, 1]); both
// splits are normalised with these so that test inputs match what the model trained on.
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;

// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from dir: inputs (N, 1, 28, 28) as
// (pixel / 255 - mean) / std, labels 0..9; N = 60,000 (train) or 10,000 (test). Throws FileError
// when files are missing (saying how to get them), malformed or inconsistent with each other.
Dataset load_fashion_mnist(const std::filesystem::path& dir = kFashionMnistDir, bool train = true);

}  // namespace pt
