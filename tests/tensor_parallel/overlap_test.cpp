// Overlapping tensor-parallel collectives with compute (--tp-overlap): the group runs a started
// collective beside its caller (and only when asked to), keeps started and blocking calls in
// order, reports a started collective's failure at its wait; the layers compute their weight
// gradients between starting the input gradient's collective and waiting for it; and
// Layer::backward (both halves at once, overlapped) gives the bits of backward_input followed
// by backward_weight, for each layer that overlaps, with and without sequence parallelism; and
// while two forwards take turns, a blocking collective passes the turn before it waits.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/in_process.h"
#include "engine/comm/take_turns.h"
#include "engine/core/error.h"
#include "engine/parallel/tensor_parallel_group.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/layers.h"
#include "layers/tensor_parallel/parallel_linear.h"
#include "tests/tensor_parallel/ranks.h"

using namespace pt;
using namespace pt::test;

namespace {

// Two ranks of the engine's group over in-process communicators, with their CPU devices.
struct TwoRanks {
  explicit TwoRanks(double timeout_s, bool overlap = true) {
    comms = make_in_process_group(2, timeout_s, "overlap test");
    for (int r = 0; r < 2; ++r) {
      devices.push_back(make_cpu_backend(r, 1));
      auto g = std::make_unique<CommunicatorTensorParallelGroup>(*comms[static_cast<size_t>(r)]);
      g->set_overlap(overlap);
      groups.push_back(std::move(g));
    }
  }
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::unique_ptr<Backend>> devices;
  std::vector<std::unique_ptr<CommunicatorTensorParallelGroup>> groups;
};

// Spins until `flag` or `seconds` passed; whether it was set.
bool wait_for(const std::atomic<bool>& flag, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!flag.load()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// A group that passes everything to `inner` and, when a started collective is waited for,
// first calls at_wait(what): what the caller computed between start and wait is visible there.
class ProbeGroup final : public TensorParallelGroup {
 public:
  ProbeGroup(TensorParallelGroup& inner, std::function<void(const std::string&)> at_wait)
      : inner_(inner), at_wait_(std::move(at_wait)) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void all_reduce_sum(Backend& be, float* data, int64_t n, std::string_view what) override {
    inner_.all_reduce_sum(be, data, n, what);
  }
  void all_gather(Backend& be, const float* in, float* out, int64_t n,
                  std::string_view what) override {
    inner_.all_gather(be, in, out, n, what);
  }
  void reduce_scatter_sum(Backend& be, const float* in, float* out, int64_t n,
                          std::string_view what) override {
    inner_.reduce_scatter_sum(be, in, out, n, what);
  }
  std::unique_ptr<PendingCollective> start_all_reduce_sum(Backend& be, float* data, int64_t n,
                                                          std::string_view what) override {
    return probe(inner_.start_all_reduce_sum(be, data, n, what), what);
  }
  std::unique_ptr<PendingCollective> start_all_gather(Backend& be, const float* in, float* out,
                                                      int64_t n, std::string_view what) override {
    return probe(inner_.start_all_gather(be, in, out, n, what), what);
  }
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(Backend& be, const float* in,
                                                              float* out, int64_t n,
                                                              std::string_view what) override {
    return probe(inner_.start_reduce_scatter_sum(be, in, out, n, what), what);
  }

 private:
  class Probe final : public PendingCollective {
   public:
    Probe(std::unique_ptr<PendingCollective> inner, std::string what,
          const std::function<void(const std::string&)>& at_wait)
        : inner_(std::move(inner)), what_(std::move(what)), at_wait_(at_wait) {}
    void wait() override {
      at_wait_(what_);
      inner_->wait();
    }

   private:
    std::unique_ptr<PendingCollective> inner_;
    std::string what_;
    const std::function<void(const std::string&)>& at_wait_;
  };
  std::unique_ptr<PendingCollective> probe(std::unique_ptr<PendingCollective> p,
                                           std::string_view what) {
    return std::make_unique<Probe>(std::move(p), std::string(what), at_wait_);
  }

  TensorParallelGroup& inner_;
  std::function<void(const std::string&)> at_wait_;
};

std::vector<float> host_of(Backend& be, const Tensor& t) {
  std::vector<float> h(static_cast<size_t>(t.numel()));
  be.copy_to_host(h.data(), t.data(), t.bytes());
  return h;
}

bool all_zero(const std::vector<float>& v) {
  for (float x : v)
    if (x != 0.f) return false;
  return true;
}

}  // namespace

TEST_CASE("a started collective runs while its caller goes on, and only with overlap on") {
  TwoRanks two(/*timeout_s=*/5);
  // Rank 1 joins the all-reduce only once rank 0's start has returned: a start that waited for
  // the collective would never return (and time out after 5 s).
  std::atomic<bool> started{false};
  std::vector<std::vector<float>> data{{1.f, 2.f, 3.f}, {10.f, 20.f, 30.f}};
  std::vector<std::vector<float>> gathered(2, std::vector<float>(6));
  std::thread rank1([&] {
    REQUIRE(wait_for(started, 5));
    Backend& be = *two.devices[1];
    two.groups[1]->all_reduce_sum(be, data[1].data(), 3, "test: sum");
    two.groups[1]->all_gather(be, data[1].data(), gathered[1].data(), 3, "test: gather");
  });
  Backend& be = *two.devices[0];
  auto sum = two.groups[0]->start_all_reduce_sum(be, data[0].data(), 3, "test: sum");
  started = true;
  // A blocking call while the sum is in flight runs after it, as on the other rank.
  two.groups[0]->all_gather(be, data[0].data(), gathered[0].data(), 3, "test: gather");
  sum->wait();
  rank1.join();
  for (int r = 0; r < 2; ++r) {
    CHECK(data[static_cast<size_t>(r)] == std::vector<float>{11.f, 22.f, 33.f});
    CHECK(gathered[static_cast<size_t>(r)] ==
          std::vector<float>{11.f, 22.f, 33.f, 11.f, 22.f, 33.f});
  }
}

TEST_CASE("with overlap off a started collective runs where it is started") {
  // Rank 1 never joins: with overlap on the start returns at once and the wait fails (below);
  // off, the start itself waits for rank 1 and fails.
  TwoRanks two(/*timeout_s=*/0.2, /*overlap=*/false);
  std::vector<float> mine{1.f};
  CHECK_THROWS_AS(two.groups[0]->start_all_reduce_sum(*two.devices[0], mine.data(), 1,
                                                      "test: sum that runs at its start"),
                  TimeoutError);
}

TEST_CASE("while two forwards take turns a blocking collective lets the other compute first") {
  // Rank 0 runs two pieces taking turns (engine/comm/take_turns.h); the first calls a blocking
  // all-reduce, the second sets a flag. Rank 1 joins the all-reduce only once the flag is set:
  // a call that held the turn until it was done would wait for rank 1, which waits for the
  // flag (2 s). With overlap off the group never passes the turn, so the flag comes only after
  // the sum (checked through the order the pieces ran in).
  for (const bool overlap : {true, false}) {
    CAPTURE(overlap);
    TwoRanks two(/*timeout_s=*/5, overlap);
    std::atomic<bool> second_ran{false};
    std::vector<std::vector<float>> data{{1.f, 2.f}, {10.f, 20.f}};
    std::vector<std::string> order;  // rank 0's pieces (one runs at a time)
    bool in_time = true;
    std::thread rank1([&] {
      if (overlap) in_time = wait_for(second_ran, 2);  // then joins anyway: the test ends
      two.groups[1]->all_reduce_sum(*two.devices[1], data[1].data(), 2, "test: turn sum");
    });
    TakeTurns::run(
        [&] {
          two.groups[0]->all_reduce_sum(*two.devices[0], data[0].data(), 2, "test: turn sum");
          order.push_back("sum");
        },
        [&] {
          order.push_back("other");
          second_ran = true;
        });
    rank1.join();
    CHECK(in_time);
    for (const auto& d : data) CHECK(d == std::vector<float>{11.f, 22.f});
    CHECK(order == (overlap ? std::vector<std::string>{"other", "sum"}
                            : std::vector<std::string>{"sum", "other"}));
  }
}

TEST_CASE("a started collective's failure is thrown by its wait, naming it") {
  TwoRanks two(/*timeout_s=*/0.2);
  std::vector<float> mine{1.f};
  auto sum = two.groups[0]->start_all_reduce_sum(*two.devices[0], mine.data(), 1,
                                                 "test: the sum rank 1 never joins");
  try {
    sum->wait();
    FAIL("the wait returned although rank 1 never joined");
  } catch (const TimeoutError& e) {
    CHECK(std::string(e.what()).find("test: the sum rank 1 never joins") != std::string::npos);
  }
}

TEST_CASE("a started collective dropped without a wait still completes before it goes") {
  // Its buffers may be freed right after: the handle's destruction waits for the collective.
  TwoRanks two(/*timeout_s=*/5);
  std::vector<std::vector<float>> data{{1.f, 2.f}, {10.f, 20.f}};
  std::thread rank1([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // joins late
    two.groups[1]->all_reduce_sum(*two.devices[1], data[1].data(), 2, "test: late sum");
  });
  {
    auto dropped =
        two.groups[0]->start_all_reduce_sum(*two.devices[0], data[0].data(), 2, "test: late sum");
  }
  CHECK(data[0] == std::vector<float>{11.f, 22.f});
  rank1.join();
}

TEST_CASE("Layer::backward overlaps: weight gradients are computed before the wait, same bits") {
  // Which weight gradients must be written when each input-gradient collective is waited for
  // (param_specs() order): the column layer's weight; the attention's qkv and proj weights; in
  // a block, the MLP's proj and fc weights at the fc's wait, the attention's at the attention's.
  const std::map<std::string, std::map<std::string, std::vector<size_t>>> expected{
      {"column", {{"column-parallel linear: input gradient", {0}}}},
      {"attention", {{"attention: input gradient", {0, 2}}}},
      {"block",
       {{"column-parallel linear: input gradient", {8, 10}},
        {"attention: input gradient", {2, 4}}}}};
  struct Case {
    const char* layer;
    bool sequence_parallel;
  };
  for (const Case c : {Case{"column", false}, Case{"column", true}, Case{"attention", false},
                       Case{"attention", true}, Case{"block", false}, Case{"block", true}}) {
    const std::string kind = c.layer;
    CAPTURE(kind);
    CAPTURE(c.sequence_parallel);
    constexpr int T = 2;
    constexpr int64_t d = 16, H = 4, context = 8, B = 2, out = 24;
    TpRanks ranks(T);
    std::unique_ptr<Layer> whole;
    if (kind == "column") whole = std::make_unique<Linear>(Shape{context, d}, out);
    if (kind == "attention") whole = std::make_unique<CausalSelfAttention>(d, H, context, 0.02f);
    if (kind == "block") whole = std::make_unique<TransformerBlock>(d, H, context, 4, 0.02f);
    const auto params = whole_params(*whole, 3);
    const std::vector<float> x = uniform_values(5, B * context * d);
    const auto& waits = expected.at(kind);

    struct Rank {
      LayerRun run[2];  // [0] backward_input + backward_weight, [1] backward
      std::vector<std::vector<float>> grads[2];
      std::map<std::string, bool> ready_at_wait;  // for [1]
    };
    std::vector<Rank> got(T);
    ranks.run([&](int r) {
      Rank& mine = got[static_cast<size_t>(r)];
      Backend& be = ranks.backend(r);
      for (const int together : {0, 1}) {
        Layer* current = nullptr;
        ProbeGroup probe(*ranks.tp(r).group, [&](const std::string& what) {
          const auto w = waits.find(what);
          if (!together || w == waits.end()) return;
          bool ready = true;
          for (size_t i : w->second) ready = ready && !all_zero(host_of(be, current->grads()[i]));
          mine.ready_at_wait[what] = ready;
        });
        TensorParallel tp = ranks.tp(r, c.sequence_parallel);
        tp.group = &probe;
        std::unique_ptr<Layer> layer;
        Shape xs{B, context, d};
        std::vector<float> xr = x;
        // The column layer and the attention take this rank's chunk of the sequence when
        // sequence parallel; the block (as a first block) the whole input.
        if (kind != "block" && c.sequence_parallel) {
          xs[1] = context / T;
          xr.clear();
          for (int64_t b = 0; b < B; ++b) {
            const auto first = x.begin() + (b * context + r * (context / T)) * d;
            xr.insert(xr.end(), first, first + (context / T) * d);
          }
        }
        if (kind == "column")
          layer = std::make_unique<ColumnParallelLinear>(Shape{xs[1], d}, out, true, tp);
        else if (kind == "attention")
          layer = std::make_unique<CausalSelfAttention>(d, H, context, 0.02f, tp);
        else
          layer = whole->shard_for(tp, ActivationSplit{});
        current = layer.get();
        Tensor xt = be.empty(xs);
        be.copy_from_host(xt.data(), xr.data(), xt.bytes());
        Shape ys = layer->output_shape().with_batch(B);
        const std::vector<float> dy = uniform_values(11 + static_cast<uint64_t>(r), ys.numel());
        mine.run[together] = run_layer(*layer, be, params, xt, dy, together == 1);
        for (const Tensor& g : layer->grads()) mine.grads[together].push_back(host_of(be, g));
        layer->unbind();
      }
    });
    for (int r = 0; r < T; ++r) {
      CAPTURE(r);
      const Rank& mine = got[static_cast<size_t>(r)];
      // The overlap happened: every collective waited for found its weight gradients written.
      for (const auto& item : waits) {
        CAPTURE(item.first);
        REQUIRE(mine.ready_at_wait.count(item.first) == 1);
        CHECK(mine.ready_at_wait.at(item.first));
      }
      // And changed no bit.
      CHECK(mine.run[1].y == mine.run[0].y);
      CHECK(mine.run[1].dx == mine.run[0].dx);
      CHECK(!mine.run[0].dx.empty());
      REQUIRE(mine.grads[1].size() == mine.grads[0].size());
      for (size_t i = 0; i < mine.grads[0].size(); ++i) {
        CAPTURE(i);
        CHECK(mine.grads[1][i] == mine.grads[0][i]);
        CHECK(!all_zero(mine.grads[0][i]));
      }
    }
  }
}
