#include "engine/partition/gpt_costs.h"

#include <cmath>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/partition/byte_count.h"

namespace pt {

std::vector<LayerProfile> gpt_layer_costs(const GptShape& g, double flops_per_second) {
  const auto need = [](bool ok, const char* flag, double v, const char* range) {
    if (!ok) throw UsageError(fmt::format("{} {} must be {}", flag, v, range));
  };
  need(g.layers >= 1 && g.layers <= 100000, "--gpt-layers", g.layers, "1 to 100000");
  need(g.width >= 128 && g.width <= (1 << 20) && g.width % 128 == 0, "--gpt-width",
       static_cast<double>(g.width), "a multiple of 128 (heads of 128) up to 2^20");
  need(g.context >= 1 && g.context <= (1 << 24), "--context", static_cast<double>(g.context),
       "1 to 2^24");
  need(g.vocab >= 1 && g.vocab <= (1 << 24), "--vocab", static_cast<double>(g.vocab), "1 to 2^24");
  need(std::isfinite(flops_per_second) && flops_per_second >= 1e6 && flops_per_second <= 1e18,
       "--flops", flops_per_second, "an achieved FLOP/s, 1e6 to 1e18");
  const double d = static_cast<double>(g.width), T = static_cast<double>(g.context),
               V = static_cast<double>(g.vocab), heads = d / 128;
  const auto seconds = [&](double flops_per_token) {
    return T * flops_per_token / flops_per_second;
  };
  // At the flags' maxima attention's 5 heads T^2 bytes alone pass 2^63: saturated (byte_count.h).
  const auto bytes = [](double b) { return bytes_from_double(b); };
  const int64_t boundary = bytes(2 * T * d);

  std::vector<LayerProfile> out;
  LayerProfile embedding;
  embedding.param_bytes = bytes(4 * (V + T) * d);
  embedding.activation_bytes = 0;  // the token ids only
  embedding.output_bytes = boundary;
  out.push_back(embedding);

  LayerProfile block;
  block.forward_s = seconds(24 * d * d + 4 * T * d);
  block.backward_input_s = seconds(24 * d * d + 8 * T * d);
  block.backward_weight_s = seconds(24 * d * d);
  block.param_bytes = bytes(4 * (12 * d * d + 13 * d));
  block.activation_bytes = bytes(34 * T * d + 5 * heads * T * T);
  block.output_bytes = boundary;
  out.insert(out.end(), static_cast<size_t>(g.layers), block);

  LayerProfile head;
  head.forward_s = head.backward_input_s = head.backward_weight_s = seconds(2 * d * V);
  head.param_bytes = bytes(4 * (V * d + 2 * d));
  head.activation_bytes = bytes(2 * T * d + 4 * T * V);  // its input, and f32 logits for the loss
  head.output_bytes = 4;                                 // the loss
  out.push_back(head);
  return out;
}

}  // namespace pt
