// Fuzz target: pipetrain-plan's two input files, the layer-cost file
// (engine/partition/cost_file.h) and the cluster file (engine/plan/cluster.h), as --costs and
// --cluster read them. The first byte chooses the parser (even: costs, odd: cluster), the rest is
// the file. Every input must parse or be refused with FileError; a cost file that parses must
// print (cost_file_text) to text that parses back to the same numbers, and scale to any size
// without a NaN.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "engine/core/error.h"
#include "engine/partition/cost_file.h"
#include "engine/plan/cluster.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  pt::fuzz::load_or_refuse<pt::FileError>([&] {
    if (data[0] % 2 == 1) {
      const pt::Cluster c = pt::parse_cluster_text(text, "fuzz input");
      if (c.devices < 1 || !(c.intra_node.bytes_per_second > 0) ||
          !(c.inter_node.bytes_per_second > 0) || c.memory_bytes <= 0)
        std::abort();
      return;
    }
    const pt::CostTables t = pt::parse_cost_text(text, "fuzz input");
    const pt::CostTables back = pt::parse_cost_text(pt::cost_file_text(t, "x"), "printed");
    if (back.by_samples.size() != t.by_samples.size()) std::abort();
    for (const auto& [n, layers] : t.by_samples) {
      const auto& other = back.by_samples.at(n);
      for (size_t l = 0; l < layers.size(); ++l)
        if (other[l].forward_s != layers[l].forward_s ||
            other[l].param_bytes != layers[l].param_bytes)
          std::abort();
    }
    for (const int64_t n : {int64_t{1}, int64_t{3}, int64_t{1} << 20})
      for (const pt::LayerProfile& p : t.for_samples(n))
        if (!std::isfinite(p.forward_s) || p.activation_bytes < 0) std::abort();
  });
  return 0;
}
