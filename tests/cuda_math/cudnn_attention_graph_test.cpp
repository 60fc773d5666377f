// The cuDNN flash-attention graphs (kernels/cuda/cudnn_attention.cpp) checked without a GPU:
// cuDNN validates every tensor and op descriptor as it is finalized, and finalizes the
// operation graph without a handle (only choosing an engine needs the GPU). So a wrong type,
// dimension, stride or connection between the ops fails here, in CI, before a device call; that
// cuDNN's fused engine takes the graph is the GPU test's part (tests/gpu/cudnn_attention_test.cpp).
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda/cudnn_graph.h"

using namespace pt::cuda;

namespace {
struct Shape4 {
  int64_t B, T, H, Dh;
};
}  // namespace

TEST_CASE("cudnn attention graphs: every op and the operation graph finalize (no GPU needed)") {
  for (const Shape4& d : {Shape4{1, 100, 2, 64}, Shape4{2, 77, 1, 128}, Shape4{3, 1, 2, 64},
                          Shape4{16, 1024, 12, 64}}) {
    for (const bool backward : {false, true})
      for (const bool deterministic : {false, true}) {
        if (!backward && deterministic) continue;
        INFO("B=" << d.B << " T=" << d.T << " H=" << d.H << " Dh=" << d.Dh << " backward "
                  << backward << " deterministic " << deterministic);
        AttentionGraph g = attention_graph(backward, deterministic, d.B, d.T, d.H, d.Dh, 0.125f);
        CHECK_NOTHROW((void)g.graph.operation_graph(nullptr));
        // Forward: Q·Kᵀ, scale, the mask's 4 ops, max, subtract, exp, sum, log, add (stats),
        // divide, P·V: 14. Backward: rowsum(dO ∘ O) 3; P recomputed (Q·Kᵀ, scale, − lse, the
        // mask's 4, exp) 8; dV (reshape, matmul) 2; dS (matmul, −, ∘ P, scale) 4; dK 2; dQ
        // (reshape, matmul, and the accumulator's copy unless deterministic) 2 or 3.
        const size_t want = !backward ? 14 : deterministic ? 21 : 22;
        CHECK(g.graph.op_count() == want);
        const AttentionUids& u = g.ids;
        CHECK(u.q != 0);
        CHECK(u.lse != 0);
        CHECK((u.dq != 0) == backward);
        CHECK((u.dq_accumulator != 0) == (backward && !deterministic));
        const int64_t softmax_sum = (d.B * d.H * d.T * 4 + 255) / 256 * 256;
        CHECK(u.scratch_bytes ==
              (!backward ? 0 : softmax_sum + (deterministic ? 0 : d.B * d.H * d.T * d.Dh * 4)));
      }
  }
}

TEST_CASE("cudnn graph: a matmul of mismatched operands is refused, naming the op") {
  // The check above can fail: K declared untransposed, (b, h, s, d) x (b, h, s, d).
  cudnn_graph::Graph g;
  const cudnn_graph::Dims dims{1, 2, 16, 64}, strides{2048, 1024, 64, 1};
  const auto q = g.tensor(dims, strides, CUDNN_DATA_BFLOAT16, false);
  const auto k = g.tensor(dims, strides, CUDNN_DATA_BFLOAT16, false);
  const auto s = g.tensor({1, 2, 16, 16}, {512, 256, 16, 1}, CUDNN_DATA_FLOAT, true);
  try {
    g.matmul(q, k, s);
    (void)g.operation_graph(nullptr);
    FAIL("cuDNN took a (16 x 64) by (16 x 64) matmul");
  } catch (const cudnn_graph::Refused& e) {
    CHECK(std::string(e.what()).find("matmul") != std::string::npos);
  }
}
