// Which server holds which layers (shard_by_layer, see parameter_server.h). The server's loops
// are in ps_server.cpp (synchronous) and ps_server_async.cpp, the worker's side in ps_client.cpp,
// the messages between them in ps_protocol.h.
#include "engine/parallel/parameter_server.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "engine/core/arena.h"
#include "engine/core/error.h"

namespace pt {

namespace {

// Layers [first, last) laid out as StageParameters lays out a stage: the table, and per layer
// (relative to `first`, plus one past the end) the index of its first entry.
struct StageTable {
  SizeTable table;
  std::vector<size_t> layer_first_entry;
  StageTable(const Model& model, int first, int last) {
    for (int l = first; l < last; ++l) {
      layer_first_entry.push_back(table.entries().size());
      for (const auto& spec : model.layer(l).param_specs()) table.add(spec.name, spec.shape);
    }
    layer_first_entry.push_back(table.entries().size());
  }
  // Byte offset of layer l's first tensor (relative index), or the total past the last one.
  size_t begin(size_t l) const {
    const size_t e = layer_first_entry[l];
    return e < table.entries().size() ? table.entries()[e].offset : table.total_bytes();
  }
};

}  // namespace

// ---- sharding ----------------------------------------------------------------------------------

std::vector<PsShard> shard_by_layer(const Model& model, int servers,
                                    const std::vector<int>& layers_per_stage) {
  if (servers < 1) throw UsageError(fmt::format("--ps {} must be >= 1", servers));
  if (!model.ties().empty())
    throw UsageError(
        "--ps does not support tied parameters (their gradients are summed across layers, and "
        "across stages, before the update): untie them (pipetrain-gpt: --untied) or train this "
        "model with --dp instead");
  // The arena of the whole model as one stage: where the cuts are balanced (the same cuts for
  // every S, so a server holds the same layers whatever the stages).
  const StageTable whole(model, 0, model.num_layers());
  const size_t total = whole.table.total_bytes();
  const auto layer_begin = [&](int l) { return whole.begin(static_cast<size_t>(l)); };
  // Cut points: layer boundaries nearest to k/K of the bytes, strictly increasing.
  std::vector<int> cut{0};
  for (int k = 1; k < servers; ++k) {
    const double target = static_cast<double>(total) * k / servers;
    int best = -1;
    double best_d = 0;
    for (int l = cut.back() + 1; l < model.num_layers(); ++l) {
      if (layer_begin(l) == layer_begin(cut.back())) continue;  // no bytes in between
      const double d = std::abs(static_cast<double>(layer_begin(l)) - target);
      if (best < 0 || d < best_d) best = l, best_d = d;
    }
    if (best < 0 || layer_begin(best) == total)
      throw UsageError(fmt::format(
          "--ps {}: the model has too few layers with parameters to give each server some; use "
          "--ps {} or fewer",
          servers, k));
    cut.push_back(best);
  }
  cut.push_back(model.num_layers());
  // Stage boundaries (one stage when none are given).
  std::vector<int> stage_first{0};
  for (int n : layers_per_stage) stage_first.push_back(stage_first.back() + n);
  if (layers_per_stage.empty()) stage_first.push_back(model.num_layers());
  if (stage_first.back() != model.num_layers())
    throw std::logic_error("shard_by_layer: the stages do not cover the model");
  std::vector<StageTable> stages;
  for (size_t s = 0; s + 1 < stage_first.size(); ++s)
    stages.emplace_back(model, stage_first[s], stage_first[s + 1]);
  std::vector<PsShard> out;
  size_t global = 0;
  for (int k = 0; k < servers; ++k) {
    PsShard sh;
    sh.first_layer = cut[static_cast<size_t>(k)];
    sh.last_layer = cut[static_cast<size_t>(k) + 1];
    sh.begin = layer_begin(sh.first_layer);
    sh.end = k + 1 < servers ? layer_begin(sh.last_layer) : total;
    const size_t first_global = global;
    for (size_t e = whole.layer_first_entry[static_cast<size_t>(sh.first_layer)];
         e < whole.layer_first_entry[static_cast<size_t>(sh.last_layer)]; ++e, ++global) {
      const SizeTableEntry& te = whole.table.entries()[e];
      sh.tensors.push_back({te.offset - sh.begin, te.shape.numel(), global});
    }
    // The same layers, cut at the stage boundaries: offsets in each stage's own arena.
    size_t g = first_global;
    for (size_t s = 0; s < stages.size(); ++s) {
      const int f = std::max(sh.first_layer, stage_first[s]);
      const int l = std::min(sh.last_layer, stage_first[s + 1]);
      if (f >= l) continue;
      const StageTable& st = stages[s];
      const auto rel = [&](int layer) { return static_cast<size_t>(layer - stage_first[s]); };
      PsPiece p;
      p.stage = static_cast<int>(s);
      p.begin = st.begin(rel(f));
      // The last layer of the stage ends at the stage's (aligned) total, as the last shard does.
      p.end = l == stage_first[s + 1] ? st.table.total_bytes() : st.begin(rel(l));
      for (size_t e = st.layer_first_entry[rel(f)]; e < st.layer_first_entry[rel(l)]; ++e, ++g) {
        const SizeTableEntry& te = st.table.entries()[e];
        p.tensors.push_back({te.offset - p.begin, te.shape.numel(), g});
      }
      if (p.end > p.begin) sh.pieces.push_back(std::move(p));
    }
    out.push_back(std::move(sh));
  }
  return out;
}

}  // namespace pt
