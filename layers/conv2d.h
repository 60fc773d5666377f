#pragma once
// Conv2d (PyTorch nn.Conv2d, square kernel, groups = 1), NCHW:
//   x (B, C, H, W) -> y (B, K, P, Q),  W (K, C, k, k), b (K),
//   P = (H + 2 pad - k) / stride + 1,  Q = (W + 2 pad - k) / stride + 1,
//   y[n, o, p, q] = b[o] + sum_{c, r, s} W[o, c, r, s] x[n, c, p*stride + r - pad, q*stride + s -
//   pad].
// Backward: dx = transposed convolution of dy with W; dW += correlation of dy with x;
// db += sum of dy over (n, p, q). Init: W and b uniform in [-1/sqrt(C k k), 1/sqrt(C k k)).
#include <cstdint>
#include <string_view>

#include "engine/core/backend.h"
#include "layers/layer.h"

namespace pt {

class Conv2d final : public Layer {
 public:
  static constexpr std::string_view kKind = "conv2d";

  // in: (C, H, W).
  Conv2d(Shape in, int64_t out_channels, int64_t kernel, int64_t stride = 1, int64_t padding = 0,
         bool bias = true);

  std::string_view kind() const override { return kKind; }
  int64_t out_channels() const { return K_; }
  int64_t kernel() const { return k_; }
  int64_t stride() const { return stride_; }
  int64_t padding() const { return pad_; }
  bool has_bias() const { return bias_; }
  // The op shape for a batch of B samples.
  Conv2dShape op_shape(int64_t B) const;

  std::vector<ParamSpec> param_specs() const override;
  LayerCost cost() const override;

  Tensor forward(const Tensor& x, LayerContext& ctx) override;
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override;
  void backward_weight(const Tensor& dy, LayerContext& ctx) override;

 private:
  int64_t K_, k_, stride_, pad_;
  bool bias_;
};

}  // namespace pt
