// pipetrain-plan's inputs and the planner's cluster model: the layer-cost file (round trip,
// scaling, malformed lines named), the cluster file, where boundaries and all-reduces cross
// nodes, the GPT's FLOPs, and the planner against the analytic formulas (1F1B's bubble with
// F = I = W and free transfers; each boundary's transfer on the critical path; the inter-node
// link where a boundary or the all-reduce crosses nodes; the estimate-then-simulate search
// finding the exhaustive search's best).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/core/error.h"
#include "engine/partition/cost_file.h"
#include "engine/partition/gpt_costs.h"
#include "engine/plan/cluster.h"
#include "engine/plan/planner.h"

using namespace pt;

namespace {

#define CHECK_FILE_ERROR(expr, text) CHECK_THROWS_WITH_AS(expr, doctest::Contains(text), FileError)

LayerProfile layer(double s, int64_t act, int64_t out, int64_t params) {
  LayerProfile p;
  p.forward_s = p.backward_input_s = p.backward_weight_s = s;
  p.activation_bytes = act;
  p.output_bytes = out;
  p.param_bytes = params;
  return p;
}

const char* kCluster = R"(# two nodes of two
devices 4
memory_gib 1.5
devices_per_node 2   # a comment after a value
intra_node_gb_per_s 100
intra_node_latency_us 2
inter_node_gb_per_s 10
inter_node_latency_us 20
)";

std::string cluster_with(const std::string& key, const std::string& line) {
  std::string out;
  size_t at = 0;
  const std::string text = kCluster;
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    std::string l = text.substr(at, end - at);
    at = end + 1;
    if (l.rfind(key + " ", 0) == 0) l = line;
    out += l + "\n";
  }
  return out;
}

// One candidate of the planner, found by shape.
const PlanCandidate* find(const PlannerResult& res, int S, int R, int M,
                          Placement placement = Placement::stages) {
  const auto it = std::find_if(res.ranked.begin(), res.ranked.end(), [&](const PlanCandidate& c) {
    return c.stages == S && c.replicas == R && c.microbatches == M && c.placement == placement;
  });
  return it == res.ranked.end() ? nullptr : &*it;
}

}  // namespace

TEST_CASE("cost file: round trip, and sizes without a table scaled from the nearest") {
  CostTables t;
  t.by_samples[4] = {layer(1.25e-4, 4096, 512, 1000), layer(3.0000000000000001e-7, 0, 8, 0)};
  t.by_samples[16] = {layer(4e-4, 16384, 2048, 1000), layer(1e-6, 0, 32, 0)};
  const CostTables back = parse_cost_text(cost_file_text(t, "a test\nsecond line"), "t.costs");
  REQUIRE(back.by_samples.size() == 2);
  for (const auto& [n, layers] : t.by_samples)
    for (size_t l = 0; l < layers.size(); ++l) {
      const LayerProfile& a = layers[l];
      const LayerProfile& b = back.by_samples.at(n)[l];
      CHECK(a.forward_s == b.forward_s);  // bit for bit
      CHECK(a.backward_weight_s == b.backward_weight_s);
      CHECK(a.activation_bytes == b.activation_bytes);
      CHECK(a.output_bytes == b.output_bytes);
      CHECK(a.param_bytes == b.param_bytes);
    }
  CHECK(back.for_samples(16)[0].forward_s == 4e-4);  // the table itself
  const auto eight = back.for_samples(8);            // from 4, x 2
  CHECK(eight[0].forward_s == doctest::Approx(2.5e-4));
  CHECK(eight[0].activation_bytes == 8192);
  CHECK(eight[0].output_bytes == 1024);
  CHECK(eight[0].param_bytes == 1000);   // parameters do not scale
  const auto two = back.for_samples(2);  // below the smallest: from 4, x 0.5
  CHECK(two[0].backward_input_s == doctest::Approx(6.25e-5));
  CHECK(two[0].activation_bytes == 2048);
  CHECK(back.for_samples(32)[0].output_bytes == 4096);  // from 16
  // Without an epilogue line the epilogue is free; with one it comes back bit for bit.
  CHECK(back.epilogue.serial_s_per_param == 0);
  CHECK(back.epilogue.update_s_per_param == 0);
  t.epilogue = {5.123456789e-10, 7.0000000000000001e-10};
  const CostTables with = parse_cost_text(cost_file_text(t, "x"), "t.costs");
  CHECK(with.epilogue.serial_s_per_param == t.epilogue.serial_s_per_param);
  CHECK(with.epilogue.update_s_per_param == t.epilogue.update_s_per_param);
  CHECK(with.by_samples.size() == 2);
}

TEST_CASE("cost file: a malformed file names the file, the line and what was expected") {
  const std::string head = "# costs\nsamples 2\n";
  CHECK_FILE_ERROR(parse_cost_text("", "c.costs"), "c.costs: no 'samples N' table");
  CHECK_FILE_ERROR(parse_cost_text("# only\n1 1 1 1 1 1\n", "c.costs"),
                   "c.costs:2: a layer line before any 'samples N' line");
  CHECK_FILE_ERROR(parse_cost_text(head + "1 1 1 1 1\n", "c.costs"), "c.costs:3: 5 fields");
  CHECK_FILE_ERROR(parse_cost_text(head + "nan 1 1 1 1 1\n", "c.costs"),
                   "c.costs:3: forward_s is 'nan': expected seconds");
  CHECK_FILE_ERROR(parse_cost_text(head + "1 inf 1 1 1 1\n", "c.costs"), "backward_input_s");
  CHECK_FILE_ERROR(parse_cost_text(head + "1 1 1e400 1 1 1\n", "c.costs"), "backward_weight_s");
  CHECK_FILE_ERROR(parse_cost_text(head + "1 1 1 -4 1 1\n", "c.costs"),
                   "activation_bytes is '-4': expected whole bytes");
  CHECK_FILE_ERROR(parse_cost_text(head + "1 1 1 4 1.5 1\n", "c.costs"), "output_bytes");
  CHECK_FILE_ERROR(parse_cost_text(head + "1 1 1 4 1 1e30\n", "c.costs"), "param_bytes");
  CHECK_FILE_ERROR(parse_cost_text(head + "1 1 1 4 1 1x\n", "c.costs"), "c.costs:3: param_bytes");
  CHECK_FILE_ERROR(parse_cost_text("samples 0\n", "c.costs"), "c.costs:1: samples is '0'");
  CHECK_FILE_ERROR(parse_cost_text("samples 2 3\n", "c.costs"), "expected 'samples N'");
  CHECK_FILE_ERROR(parse_cost_text(head + "samples 4\n1 1 1 1 1 1\n", "c.costs"),
                   "c.costs:2: a 'samples' table without layer lines");
  CHECK_FILE_ERROR(parse_cost_text(head + "1 1 1 1 1 1\nsamples 2\n1 1 1 1 1 1\n", "c.costs"),
                   "c.costs:4: a second table for samples 2");
  CHECK_FILE_ERROR(
      parse_cost_text(head + "1 1 1 1 1 1\nsamples 1\n1 1 1 1 1 1\n1 1 1 1 1 1\n", "c.costs"),
      "c.costs:4: this table has 2 layers, the first (line 2) 1");
  CHECK_FILE_ERROR(parse_cost_text(std::string("samples 1\n1 1 1 1 1 \0\n", 22), "c.costs"),
                   "c.costs:2: a NUL byte");
  CHECK_FILE_ERROR(read_cost_file("/nonexistent/x.costs"), "--costs /nonexistent/x.costs");
  CHECK_FILE_ERROR(parse_cost_text("epilogue 1e-9\n" + head + "1 1 1 1 1 1\n", "c.costs"),
                   "c.costs:1: expected 'epilogue SERIAL UPDATE'");
  CHECK_FILE_ERROR(parse_cost_text(head + "epilogue 1e-9 nan\n1 1 1 1 1 1\n", "c.costs"),
                   "c.costs:3: epilogue UPDATE is 'nan'");
  CHECK_FILE_ERROR(parse_cost_text(head + "epilogue -1 0\n1 1 1 1 1 1\n", "c.costs"),
                   "c.costs:3: epilogue SERIAL is '-1'");
  CHECK_FILE_ERROR(
      parse_cost_text("epilogue 0 0\n" + head + "epilogue 0 0\n1 1 1 1 1 1\n", "c.costs"),
      "c.costs:4: a second 'epilogue' line (the first is line 1)");
}

TEST_CASE("cluster file: values, and every refusal names the line and the key") {
  const Cluster c = parse_cluster_text(kCluster, "c.txt");
  CHECK(c.devices == 4);
  CHECK(c.devices_per_node == 2);
  CHECK(c.memory_bytes == int64_t{3} << 29);
  CHECK(c.intra_node.bytes_per_second == 100e9);
  CHECK(c.intra_node.latency_s == doctest::Approx(2e-6));
  CHECK(c.inter_node.bytes_per_second == 10e9);
  CHECK(c.inter_node.latency_s == doctest::Approx(20e-6));
  CHECK_FILE_ERROR(parse_cluster_text(cluster_with("devices", "gpus 4"), "c.txt"),
                   "c.txt:2: unknown key 'gpus': expected one of devices, memory_gib");
  CHECK_FILE_ERROR(parse_cluster_text(cluster_with("devices", "# none"), "c.txt"),
                   "c.txt: no devices line");
  CHECK_FILE_ERROR(parse_cluster_text(cluster_with("devices", "devices 4.5"), "c.txt"),
                   "c.txt:2: devices is '4.5': expected a whole number");
  CHECK_FILE_ERROR(parse_cluster_text(cluster_with("devices", "devices 5"), "c.txt"),
                   "5 devices are not whole nodes of devices_per_node 2");
  CHECK_FILE_ERROR(
      parse_cluster_text(cluster_with("inter_node_gb_per_s", "inter_node_gb_per_s 0"), "c.txt"),
      "c.txt:7: inter_node_gb_per_s is '0': expected GB/s");
  CHECK_FILE_ERROR(parse_cluster_text(cluster_with("memory_gib", "memory_gib"), "c.txt"),
                   "c.txt:3: memory_gib takes one value");
  CHECK_FILE_ERROR(parse_cluster_text(std::string(kCluster) + "devices 8\n", "c.txt"),
                   "c.txt:9: devices again (first on line 2)");
}

TEST_CASE("cluster placement: which boundaries and all-reduces cross nodes") {
  // A replica's S devices are neighbours (replica r, stage device s: device r S + s).
  CHECK(boundaries_crossing_nodes(4, 2, 8) == std::vector<bool>{false, false, false});
  CHECK(!allreduce_crosses_nodes(4, 2, 8));  // all 8 on one node
  auto b = boundaries_crossing_nodes(16, 2, 8);
  for (int s = 0; s < 15; ++s) CHECK(b[static_cast<size_t>(s)] == (s == 7));
  CHECK(allreduce_crosses_nodes(16, 2, 8));
  // S = 12 on nodes of 8: replica 0 crosses at 7 -> 8, replica 1 (devices 12..23) at 15 -> 16.
  b = boundaries_crossing_nodes(12, 2, 8);
  for (int s = 0; s < 11; ++s) CHECK(b[static_cast<size_t>(s)] == (s == 3 || s == 7));
  CHECK(boundaries_crossing_nodes(8, 1, 0) == std::vector<bool>(7, false));  // one node
  CHECK(!allreduce_crosses_nodes(2, 4, 0));
  CHECK(!allreduce_crosses_nodes(8, 1, 2));  // no all-reduce
  // A stage's replicas as neighbours (device s R + r): 4 x 2 on nodes of 4 cross between
  // stages 1 and 2 only, and every all-reduce pair shares a node.
  CHECK(boundaries_crossing_nodes(4, 2, 4, Placement::replicas) ==
        std::vector<bool>{false, true, false});
  CHECK(!allreduce_crosses_nodes(4, 2, 4, Placement::replicas));
  CHECK(allreduce_crosses_nodes(4, 2, 4, Placement::stages));
  CHECK(allreduce_crosses_nodes(2, 8, 4, Placement::replicas));  // 8 replicas on nodes of 4
}

TEST_CASE("GPT costs: FLOPs at the stated rate, and refusals naming the flag") {
  GptShape g{2, 256, 64, 1000};
  const auto c = gpt_layer_costs(g, 1e12);
  REQUIRE(c.size() == 4);  // embedding, 2 blocks, head
  const double d = 256, T = 64;
  CHECK(c[1].forward_s == doctest::Approx(T * (24 * d * d + 4 * T * d) / 1e12));
  CHECK(c[1].backward_input_s == doctest::Approx(T * (24 * d * d + 8 * T * d) / 1e12));
  CHECK(c[1].backward_weight_s == doctest::Approx(T * 24 * d * d / 1e12));
  CHECK(c[1].param_bytes == 4 * (12 * 256 * 256 + 13 * 256));
  CHECK(c[1].output_bytes == 2 * 64 * 256);
  CHECK(c[3].forward_s == doctest::Approx(T * 2 * d * 1000 / 1e12));
  CHECK_THROWS_WITH_AS(gpt_layer_costs({2, 200, 64, 1000}, 1e12), doctest::Contains("--gpt-width"),
                       UsageError);
  CHECK_THROWS_WITH_AS(gpt_layer_costs(g, std::nan("")), doctest::Contains("--flops"), UsageError);
  CHECK_THROWS_WITH_AS(gpt_layer_costs({0, 256, 64, 1000}, 1e12), doctest::Contains("--gpt-layers"),
                       UsageError);
}

TEST_CASE("what-if: 1F1B's bubble is (S-1)/(M+S-1) with F = I = W and free transfers") {
  const std::vector<LayerProfile> costs(4, layer(1e-3, 16, 0, 64));
  PlannerRequest r;
  r.devices = 4;
  r.batch = 8;
  r.schedules = {"1f1b"};
  r.recompute = {{RecomputePolicy::Kind::never, 0}};
  for (const int top : {0, 50}) {  // exhaustive, and estimate-then-simulate
    r.simulate_top = top;
    const PlannerResult res = search_plans([&](int64_t) { return costs; }, r);
    for (const int M : {1, 2, 4, 8}) {
      const PlanCandidate* c = find(res, 4, 1, M);
      REQUIRE(c != nullptr);
      CHECK(c->bubble == doctest::Approx(3.0 / (M + 3)));
      CHECK(c->step_s == doctest::Approx((M + 3) * 3e-3));
    }
  }
}

TEST_CASE("what-if: each boundary's transfer, over the link it crosses, is on the critical path") {
  // One micro-batch through 4 stages: S (F + I + W) + 2 x the boundaries' transfers (the forward
  // there, the gradient back).
  const int64_t bytes = 1 << 20;
  const std::vector<LayerProfile> costs(4, layer(1e-3, 16, bytes, 64));
  PlannerRequest r;
  r.devices = 4;
  r.batch = 1;
  r.schedules = {"1f1b"};
  r.recompute = {{RecomputePolicy::Kind::never, 0}};
  r.transfer_bytes_per_second = 1e9;
  r.transfer_latency_s = 5e-6;
  const double intra = bytes / 1e9 + 5e-6, inter = bytes / 1e8 + 50e-6;
  PlanCandidate c = *find(search_plans([&](int64_t) { return costs; }, r), 4, 1, 1);
  CHECK(c.step_s == doctest::Approx(12e-3 + 2 * 3 * intra));
  // Nodes of two: the boundary 1 -> 2 crosses, over the slower link.
  r.devices_per_node = 2;
  r.inter_node = {1e8, 50e-6};
  for (const int top : {0, 4}) {
    r.simulate_top = top;
    c = *find(search_plans([&](int64_t) { return costs; }, r), 4, 1, 1);
    CHECK(c.step_s == doctest::Approx(12e-3 + 2 * (2 * intra + inter)));
  }
}

TEST_CASE("what-if: the all-reduce takes the inter-node link when its replicas span nodes") {
  const std::vector<LayerProfile> costs(4, layer(1e-3, 16, 0, int64_t{1} << 24));
  PlannerRequest r;
  r.devices = 4;
  r.batch = 4;
  r.schedules = {"1f1b"};
  r.recompute = {{RecomputePolicy::Kind::never, 0}};
  r.allreduce_bytes_per_second = 1e10;
  r.allreduce_latency_s = 1e-6;
  r.devices_per_node = 2;
  r.inter_node = {1e9, 1e-5};
  const PlannerResult res = search_plans([&](int64_t) { return costs; }, r);
  // S = 2, R = 2: replica 0 on node 0, replica 1 on node 1: each stage's ring crosses.
  const PlanCandidate* c = find(res, 2, 2, 1);
  REQUIRE(c != nullptr);
  const double grads = 2.0 * (1 << 24);  // two layers' parameter (= gradient) bytes per device
  CHECK(c->allreduce_s == doctest::Approx(grads / 1e9 + 2 * 1e-5));
  // With a stage's replicas on one node the ring stays inside it, and the boundary crosses.
  const PlanCandidate* inside = find(res, 2, 2, 1, Placement::replicas);
  REQUIRE(inside != nullptr);
  CHECK(inside->allreduce_s == doctest::Approx(grads / 1e10 + 2 * 1e-6));
  // On one node (4 per node) the same plan all-reduces over the intra-node figures, and the
  // placements do not differ: one is searched.
  r.devices_per_node = 4;
  const PlannerResult one_node = search_plans([&](int64_t) { return costs; }, r);
  CHECK(find(one_node, 2, 2, 1, Placement::replicas) == nullptr);
  const PlanCandidate* one = find(one_node, 2, 2, 1);
  REQUIRE(one != nullptr);
  CHECK(one->allreduce_s == doctest::Approx(grads / 1e10 + 2 * 1e-6));
}

TEST_CASE("what-if: estimate-then-simulate finds the exhaustive search's best") {
  // Uneven layers, a memory cap and a costly all-reduce: the best plan is not at an extreme.
  std::vector<LayerProfile> costs;
  for (int l = 0; l < 12; ++l)
    costs.push_back(layer(1e-4 * (1 + l % 3), int64_t{1} << 18, 1 << 14, int64_t{1} << 22));
  PlannerRequest r;
  r.devices = 8;
  r.batch = 64;
  r.mem_cap_bytes = int64_t{96} << 20;
  r.devices_per_node = 4;
  r.inter_node = {1e9, 10e-6};
  const auto costs_for = [&](int64_t mb) {
    std::vector<LayerProfile> c = costs;
    for (LayerProfile& p : c) {
      p.forward_s *= static_cast<double>(mb);
      p.backward_input_s *= static_cast<double>(mb);
      p.backward_weight_s *= static_cast<double>(mb);
      p.activation_bytes *= mb;
      p.output_bytes *= mb;
    }
    return c;
  };
  // Caps from loose to where only recomputation or a memory-balanced split fits.
  for (const int64_t cap_mib : {96, 40, 30, 26}) {
    CAPTURE(cap_mib);
    r.mem_cap_bytes = cap_mib << 20;
    r.simulate_top = 0;
    const PlannerResult all = search_plans(costs_for, r);
    r.simulate_top = 8;
    const PlannerResult pruned = search_plans(costs_for, r);
    REQUIRE(!pruned.ranked.empty());
    CHECK(pruned.simulated <= 16);
    CHECK(all.simulated > 10 * pruned.simulated);
    const PlanCandidate& a = all.ranked.front();
    const PlanCandidate& b = pruned.ranked.front();
    CHECK(std::isfinite(b.step_s));
    CHECK(b.step_s == doctest::Approx(a.step_s));
    CHECK(b.max_peak_bytes() <= r.mem_cap_bytes);
  }
}
