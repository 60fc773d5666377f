// Tensor parallelism in the planner (engine/plan/tensor_parallel.h, gpt_costs.h): the ring
// all-reduce and the per-rank memory of a GPT block against values worked by hand, the degrees a
// cluster allows and the refusals of the others, and three rows of Narayanan et al. 2021's
// Table 1 (SC'21, weak scaling on Selene) planned on examples/plan/clusters/selene-a100.txt as
// scripts/megatron-table.sh plans all ten: t <= 8, t divides the heads, and the predicted
// TFLOP/s per GPU within 15% of the published.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "engine/core/error.h"
#include "engine/partition/gpt_costs.h"
#include "engine/plan/cluster.h"
#include "engine/plan/planner.h"
#include "engine/plan/tensor_parallel.h"

using namespace pt;

namespace {

#define CHECK_USAGE(expr, text) CHECK_THROWS_WITH_AS(expr, doctest::Contains(text), UsageError)

// A GPT of Table 1's shape: sequence 2048, vocabulary 51,200.
GptShape table_gpt(int layers, int64_t width, int heads) {
  return {layers, width, 2048, 51200, heads};
}

}  // namespace

TEST_CASE("tensor parallel: a ring all-reduce among T ranks, by hand") {
  const Link nvlink{230e9, 10e-6};
  // 2 (T-1)/T x bytes / bandwidth + 2 (T-1) x latency: one block's activations, s h 16-bit
  // values of a 2048 x 4096 sequence = 16 MiB, among 8: 1.75 x 16777216 / 230e9 + 14 x 10 us.
  CHECK(ring_allreduce_s(16777216, 8, nvlink) == doctest::Approx(2.676527304e-4).epsilon(1e-9));
  CHECK(ring_allreduce_s(16777216, 2, nvlink) == doctest::Approx(16777216 / 230e9 + 20e-6));
  CHECK(ring_allreduce_s(16777216, 1, nvlink) == 0);
}

TEST_CASE("tensor parallel: a GPT block's share of one rank, by hand") {
  const GptShape g = table_gpt(2, 4096, 32);  // d = 4096, a = 32, s = 2048
  // Korthikanti et al. 2022: 34 s h + 5 a s^2 bytes per sequence at t = 1 (with or without
  // sequence parallelism): 285,212,672 + 671,088,640.
  CHECK(gpt_block_activation_bytes(g, 1, false) == 956301312.0);
  CHECK(gpt_block_activation_bytes(g, 1, true) == 956301312.0);
  // t = 8 without it: 10 s h + 24 s h / 8 + 5 a s^2 / 8 = 83,886,080 + 25,165,824 + 83,886,080.
  CHECK(gpt_block_activation_bytes(g, 8, false) == 192937984.0);
  // With it: everything / 8.
  CHECK(gpt_block_activation_bytes(g, 8, true) == 119537664.0);

  const double flops = 100e12;
  const ShardedCosts c = gpt_sharded_costs(g, flops, 8, false, 2);
  REQUIRE(c.layers.size() == 4);  // embedding, 2 blocks, head
  const LayerProfile& block = c.layers[1];
  // 12 d^2 / 8 + 13 d parameters, f32: 4 x (25,165,824 + 53,248).
  CHECK(block.param_bytes == 100876288);
  CHECK(block.activation_bytes == 2 * 192937984);        // a micro-batch of 2 sequences
  CHECK(block.output_bytes == 2 * 2 * 2048 * 4096 / 8);  // each rank sends its 1/8
  // (24 d^2 + 4 s d) FLOPs per token / 8, 2 x 2048 tokens, at 100 TFLOP/s.
  CHECK(block.forward_s ==
        doctest::Approx(2.0 * 2048 * (24.0 * 4096 * 4096 + 4.0 * 2048 * 4096) / 8 / flops));
  // Two all-reduces in F and two in I, of s h 16-bit values per sequence.
  CHECK(c.allreduce_bytes[1] == 2 * 2 * 2048 * 4096);
  CHECK(c.forward_allreduces[1] == 2);
  CHECK(c.backward_allreduces[1] == 2);
  CHECK(c.forward_allreduces[0] == 1);   // the vocabulary-split embedding's output
  CHECK(c.backward_allreduces[3] == 1);  // the head's input gradient
  // ... which the planner adds to F and I on the node's all-reduce link.
  const Link nvlink{230e9, 10e-6};
  const auto timed = with_tensor_parallel_traffic(c, 8, nvlink);
  const double one = ring_allreduce_s(2.0 * 2 * 2048 * 4096, 8, nvlink);
  CHECK(timed[1].forward_s == doctest::Approx(block.forward_s + 2 * one));
  CHECK(timed[1].backward_input_s == doctest::Approx(block.backward_input_s + 2 * one));
  CHECK(timed[1].backward_weight_s == block.backward_weight_s);  // dW needs no all-reduce

  // T = 1: the unsharded costs, nothing exchanged.
  const ShardedCosts one_rank = gpt_sharded_costs(g, flops, 1, false, 1);
  CHECK(one_rank.layers[1].param_bytes == gpt_layer_costs(g, flops)[1].param_bytes);
  CHECK(one_rank.allreduce_bytes[1] == 0);
  CHECK(one_rank.forward_allreduces[1] == 0);
}

TEST_CASE("tensor parallel: the degrees a cluster allows, and refusals of the others") {
  CHECK(tensor_parallel_degrees(64, 8, 24, 8) == std::vector<int>{1, 2, 4, 8});
  CHECK(tensor_parallel_degrees(64, 8, 20, 8) == std::vector<int>{1, 2, 4});
  CHECK(tensor_parallel_degrees(64, 8, 0, 8) == std::vector<int>{1});  // costs that do not shard
  CHECK(tensor_parallel_degrees(6, 0, 24, 8) == std::vector<int>{1, 2, 3, 6});  // one node of 6

  CHECK_USAGE(check_tensor_parallel(3, 64, 8, 32),
              "--tensor-parallel 3: does not divide the 32 attention heads (each rank computes "
              "whole heads); valid here: 1, 2, 4, 8");
  CHECK_USAGE(check_tensor_parallel(16, 64, 8, 32),
              "--tensor-parallel 16: does not divide the 8 devices per node");
  CHECK_USAGE(check_tensor_parallel(0, 64, 8, 32), "--tensor-parallel 0: must be >= 1");
  CHECK_USAGE(gpt_sharded_costs(table_gpt(2, 4096, 32), 1e12, 5, false, 1),
              "--tensor-parallel 5 must divide the 32 attention heads");

  // The planner refuses them too, before searching; and T > 1 for costs that do not shard.
  PlannerRequest r;
  r.devices = 16;
  r.devices_per_node = 8;
  r.batch = 16;
  r.heads = 12;
  r.tensor_parallel = {8};
  const ShardedCostsFor gpt = [](int64_t mb, int T) {
    return gpt_sharded_costs(table_gpt(2, 768, 12), 1e12, T, false, mb);
  };
  CHECK_USAGE(search_plans(gpt, r), "does not divide the 12 attention heads");
  r.tensor_parallel = {2};
  const CostsFor unsharded_costs = [](int64_t) {
    return gpt_layer_costs(table_gpt(2, 768, 12), 1e12);
  };
  CHECK_USAGE(search_plans(unsharded_costs, r), "say nothing of how the layers shard");
  // T = 2: every candidate has 2 ranks per stage and all 16 devices.
  const PlannerResult res = search_plans(gpt, r);
  REQUIRE(!res.ranked.empty());
  for (const PlanCandidate& c : res.ranked) {
    CHECK(c.tensor_parallel == 2);
    CHECK(c.tensor_parallel * c.stages * c.replicas == 16);
  }
}

// Planning thousands of devices is arithmetic the Release run checks, and the planner's paths run
// under the sanitizers in planner_test and whatif_test; here they would add ~1 minute of CI's 60
// (ASan and TSan) for no new check.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kUnderSanitizer = true;
#else
constexpr bool kUnderSanitizer = false;
#endif

TEST_CASE("tensor parallel: three rows of Megatron-LM's Table 1 (Narayanan et al., SC'21)" *
          doctest::skip(kUnderSanitizer)) {
  const Cluster selene = read_cluster_file((std::filesystem::path(__FILE__).parent_path() /
                                            "../../examples/plan/clusters/selene-a100.txt")
                                               .string());
  struct Row {
    int layers;
    int64_t width;
    int heads, gpus;
    int64_t batch;
    double published;  // TFLOP/s per GPU
  };
  // 1.7B (t = 1, p = 1), 39.1B (8, 2), 145.6B (8, 8) in the paper.
  for (const Row& row : {Row{24, 2304, 24, 32, 512, 137}, Row{48, 8192, 64, 512, 1536, 138},
                         Row{80, 12288, 96, 1536, 2304, 148}}) {
    CAPTURE(row.width);
    const GptShape g = table_gpt(row.layers, row.width, row.heads);
    PlannerRequest r;  // as pipetrain-plan builds it (examples/plan/main.cpp)
    r.devices = row.gpus;
    r.batch = row.batch;
    r.mem_cap_bytes = selene.memory_bytes;
    r.optimizer_slots = 2;
    r.schedules = {"1f1b", "interleaved:2", "interleaved:3", "interleaved:4"};
    r.recompute = {RecomputePolicy::parse("every:1")};
    r.max_microbatches = 1024;
    r.transfer_bytes_per_second = selene.intra_node.bytes_per_second;
    r.transfer_latency_s = selene.intra_node.latency_s;
    r.allreduce_bytes_per_second = selene.intra_node_allreduce.bytes_per_second;
    r.allreduce_latency_s = selene.intra_node_allreduce.latency_s;
    r.devices_per_node = selene.devices_per_node;
    r.inter_node = selene.inter_node;
    r.simulate_top = 48;
    r.heads = row.heads;
    r.tensor_parallel = tensor_parallel_degrees(row.gpus, selene.devices_per_node, row.heads,
                                                selene.devices_per_node);
    const double flops = selene.achieved_flops_per_second();
    const PlannerResult res = search_plans(ShardedCostsFor([&](int64_t mb, int T) {
                                             return gpt_sharded_costs(g, flops, T, false, mb);
                                           }),
                                           r);
    REQUIRE(!res.ranked.empty());
    const PlanCandidate& best = res.ranked.front();
    CHECK(best.tensor_parallel <= 8);
    CHECK(row.heads % best.tensor_parallel == 0);
    const double tflops = narayanan_flops_per_step(g, row.batch) / best.step_s / row.gpus / 1e12;
    CHECK(tflops == doctest::Approx(row.published).epsilon(0.15));
  }
}

TEST_CASE("tensor parallel: Narayanan et al.'s FLOPs per step, by hand") {
  // 96 B s l h^2 (1 + s / 6h + V / 16 l h) for the 1.7B row: B 512, l 24, h 2304.
  CHECK(narayanan_flops_per_step(table_gpt(24, 2304, 24), 512) ==
        doctest::Approx(1.5466830067924994e16).epsilon(1e-12));
}
