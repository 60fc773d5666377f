#include "engine/partition/layer_costs.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

namespace {

// One call's time on a machine that computes at `flops` FLOP/s and streams at `bw` bytes/s:
// whichever limit it hits first (the roofline).
double roofline(double flop_count, double bytes, double flops, double bw) {
  return std::max(flop_count / flops, bytes / bw);
}

}  // namespace

std::vector<LayerProfile> estimate_costs(const Model& model, int64_t microbatch_size,
                                         double flops_per_second, double bytes_per_second) {
  if (microbatch_size < 1)
    throw UsageError(fmt::format("micro-batch size must be >= 1 but is {}", microbatch_size));
  if (!(flops_per_second > 0) || !(bytes_per_second > 0))
    throw UsageError(fmt::format("cost estimate needs positive rates but got {} FLOP/s and {} B/s",
                                 flops_per_second, bytes_per_second));
  const double B = static_cast<double>(microbatch_size);
  std::vector<LayerProfile> out;
  out.reserve(static_cast<size_t>(model.num_layers()));
  for (int l = 0; l < model.num_layers(); ++l) {
    const Layer& layer = model.layer(l);
    const LayerCost c = layer.cost();
    LayerProfile p;
    p.param_bytes = layer.param_count() * static_cast<int64_t>(sizeof(float));
    p.activation_bytes = c.activation_bytes * microbatch_size;
    p.output_bytes = layer.output_shape().numel() * microbatch_size * 4;  // outputs are f32
    const double in = static_cast<double>(layer.input_shape().numel()) * B *
                      static_cast<double>(dtype_size(layer.input_dtype()));
    const double outb = static_cast<double>(p.output_bytes);
    const double w = static_cast<double>(p.param_bytes);
    const double saved = static_cast<double>(p.activation_bytes);
    // Bytes each call streams: F reads x and W, writes y (and the saved tensors);
    // I reads dy, W and the saved tensors, writes dx; W reads dy and the saved tensors and
    // read-modify-writes dW (gradients accumulate).
    p.forward_s =
        roofline(B * c.forward_flops, in + w + outb + saved, flops_per_second, bytes_per_second);
    p.backward_input_s = roofline(B * c.backward_input_flops, outb + w + saved + in,
                                  flops_per_second, bytes_per_second);
    // No layer before the first with parameters computes its input gradient (nothing reads it:
    // layers/model.h), so it costs nothing there.
    if (!model.needs_input_gradient(l)) p.backward_input_s = 0;
    // A layer without parameters has nothing to do in W (the default backward_weight is empty).
    if (p.param_bytes > 0 || c.backward_weight_flops > 0)
      p.backward_weight_s = roofline(B * c.backward_weight_flops, outb + saved + 2 * w,
                                     flops_per_second, bytes_per_second);
    out.push_back(p);
  }
  return out;
}

}  // namespace pt
