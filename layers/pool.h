#pragma once
// 2-D pooling over square windows (PyTorch nn.MaxPool2d / nn.AvgPool2d), NCHW:
//   x (B, C, H, W) -> y (B, C, P, Q),  P = (H + 2 pad - k) / stride + 1 (likewise Q).
//   MaxPool2d: y = max over the window (padding never wins);  dx[argmax] += dy.
//              Saves argmax (B, C, P, Q) int32.
//   AvgPool2d: y = sum over the window / (k k) (padding counts, count_include_pad = true);
//              dx = dy / (k k) spread over each window. Saves nothing.
// stride 0 means stride = kernel (PyTorch's default); padding must be at most kernel / 2.
#include <cstdint>
#include <string_view>

#include "engine/core/backend.h"
#include "layers/layer.h"

namespace pt {

class Pool2d : public Layer {
 public:
  int64_t kernel() const { return k_; }
  int64_t stride() const { return stride_; }
  int64_t padding() const { return pad_; }
  Pool2dShape op_shape(int64_t B) const;
  LayerCost cost() const override;

 protected:
  Pool2d(std::string_view kind, Shape in, int64_t kernel, int64_t stride, int64_t padding);
  int64_t k_, stride_, pad_;
};

class MaxPool2d final : public Pool2d {
 public:
  static constexpr std::string_view kKind = "maxpool2d";

  MaxPool2d(Shape in, int64_t kernel, int64_t stride = 0, int64_t padding = 0);

  std::string_view kind() const override { return kKind; }
  LayerCost cost() const override;

  Tensor forward(const Tensor& x, LayerContext& ctx) override;
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override;
};

class AvgPool2d final : public Pool2d {
 public:
  static constexpr std::string_view kKind = "avgpool2d";

  AvgPool2d(Shape in, int64_t kernel, int64_t stride = 0, int64_t padding = 0);

  std::string_view kind() const override { return kKind; }

  Tensor forward(const Tensor& x, LayerContext& ctx) override;
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override;
};

}  // namespace pt
