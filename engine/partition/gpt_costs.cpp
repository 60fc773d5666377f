#include "engine/partition/gpt_costs.h"

#include <cmath>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/partition/byte_count.h"

namespace pt {

namespace {

void check_shape(const GptShape& g, double flops_per_second) {
  const auto need = [](bool ok, const char* flag, double v, const char* range) {
    if (!ok) throw UsageError(fmt::format("{} {} must be {}", flag, v, range));
  };
  need(g.layers >= 1 && g.layers <= 100000, "--gpt-layers", g.layers, "1 to 100000");
  need(g.heads >= 0 && g.heads <= (1 << 20), "--heads", g.heads, "1 to 2^20 attention heads");
  if (g.heads == 0)
    need(g.width >= 128 && g.width <= (1 << 20) && g.width % 128 == 0, "--gpt-width",
         static_cast<double>(g.width), "a multiple of 128 (heads of 128) up to 2^20");
  else
    need(g.width >= 1 && g.width <= (1 << 20) && g.width % g.heads == 0, "--gpt-width",
         static_cast<double>(g.width),
         fmt::format("a multiple of --heads {} up to 2^20", g.heads).c_str());
  need(g.context >= 1 && g.context <= (1 << 24), "--context", static_cast<double>(g.context),
       "1 to 2^24");
  need(g.vocab >= 1 && g.vocab <= (1 << 24), "--vocab", static_cast<double>(g.vocab), "1 to 2^24");
  need(std::isfinite(flops_per_second) && flops_per_second >= 1e6 && flops_per_second <= 1e18,
       "--flops", flops_per_second, "an achieved FLOP/s, 1e6 to 1e18");
}

}  // namespace

int gpt_heads(const GptShape& g) { return g.heads > 0 ? g.heads : static_cast<int>(g.width / 128); }

double gpt_block_activation_bytes(const GptShape& g, int t, bool sequence_parallel) {
  const double d = static_cast<double>(g.width), T = static_cast<double>(g.context),
               a = gpt_heads(g), tp = t;
  if (sequence_parallel) return (34 * T * d + 5 * a * T * T) / tp;
  return 10 * T * d + 24 * T * d / tp + 5 * a * T * T / tp;
}

double narayanan_flops_per_step(const GptShape& g, int64_t batch) {
  const double B = static_cast<double>(batch), T = static_cast<double>(g.context), L = g.layers,
               d = static_cast<double>(g.width), V = static_cast<double>(g.vocab);
  return 96 * B * T * L * d * d * (1 + T / (6 * d) + V / (16 * L * d));
}

ShardedCosts gpt_sharded_costs(const GptShape& g, double flops_per_second, int t,
                               bool sequence_parallel, int64_t microbatch) {
  check_shape(g, flops_per_second);
  const int heads = gpt_heads(g);
  if (t < 1 || heads % t != 0)
    throw UsageError(fmt::format(
        "--tensor-parallel {} must divide the {} attention heads (each rank computes whole "
        "heads): use a divisor of {}",
        t, heads, heads));
  if (microbatch < 1)
    throw UsageError(fmt::format("a micro-batch of {} sequences: must be >= 1", microbatch));
  const double d = static_cast<double>(g.width), T = static_cast<double>(g.context),
               V = static_cast<double>(g.vocab), tp = t, b = static_cast<double>(microbatch);
  const auto seconds = [&](double flops_per_token) {
    return b * T * flops_per_token / tp / flops_per_second;
  };
  // At the flags' maxima attention's 5 heads T^2 bytes alone pass 2^63: saturated (byte_count.h).
  const auto bytes = [](double n) { return bytes_from_double(n); };
  // Per micro-batch (activations, what is sent and all-reduced), not parameters.
  const auto batch_bytes = [&](double per_sequence) { return bytes_from_double(b * per_sequence); };
  const int64_t boundary = batch_bytes(2 * T * d / tp);
  const int64_t exchanged = t > 1 ? batch_bytes(2 * T * d) : 0;  // an all-reduce: T d 16-bit values

  ShardedCosts out;
  const auto add = [&](const LayerProfile& p, int forward, int backward) {
    out.layers.push_back(p);
    out.allreduce_bytes.push_back(t > 1 && forward + backward > 0 ? exchanged : 0);
    out.forward_allreduces.push_back(t > 1 ? forward : 0);
    out.backward_allreduces.push_back(t > 1 ? backward : 0);
  };
  LayerProfile embedding;
  embedding.param_bytes = bytes(4 * (V * d / tp + T * d));
  embedding.activation_bytes = 0;  // the token ids only
  embedding.output_bytes = boundary;
  add(embedding, 1, 0);

  LayerProfile block;
  block.forward_s = seconds(24 * d * d + 4 * T * d);
  block.backward_input_s = seconds(24 * d * d + 8 * T * d);
  block.backward_weight_s = seconds(24 * d * d);
  block.param_bytes = bytes(4 * (12 * d * d / tp + 13 * d));
  block.activation_bytes = batch_bytes(gpt_block_activation_bytes(g, t, sequence_parallel));
  block.output_bytes = boundary;
  for (int l = 0; l < g.layers; ++l) add(block, 2, 2);

  LayerProfile head;
  head.forward_s = head.backward_input_s = head.backward_weight_s = seconds(2 * d * V);
  head.param_bytes = bytes(4 * (V * d / tp + 2 * d));
  // Its input, and f32 logits (this rank's V / t of them) for the loss.
  head.activation_bytes = batch_bytes(2 * T * d / (sequence_parallel ? tp : 1) + 4 * T * V / tp);
  head.output_bytes = 4;  // the loss
  add(head, 0, 1);
  return out;
}

std::vector<LayerProfile> gpt_layer_costs(const GptShape& g, double flops_per_second) {
  return gpt_sharded_costs(g, flops_per_second, 1, false, 1).layers;
}

}  // namespace pt
