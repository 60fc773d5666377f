// The library entry point: the typed options parse their text forms once (and print them back),
// refuse anything else naming the valid forms, and make_training builds what they describe — a
// 2-stage pipeline on two CPU devices that learns, or nothing but a plan.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "engine/devices/devices.h"
#include "engine/setup/auto_plan.h"
#include "engine/setup/training_run.h"
#include "layers/builder.h"
#include "tests/engine/synthetic.h"

using namespace pt;

#define CHECK_USAGE(expr, text) CHECK_THROWS_WITH_AS(expr, doctest::Contains(text), UsageError)

TEST_CASE("ScheduleChoice: every form parses and prints back; others name the valid forms") {
  for (const char* text : {"gpipe", "1f1b", "interleaved:1", "interleaved:3", "zb-h1", "zb-h2",
                           "zbv", "v-half", "v-min", "dualpipev", "file:dir/my schedule.txt"})
    CHECK(ScheduleChoice::parse(text).str() == text);
  CHECK_USAGE(ScheduleChoice::parse("v-third"), "zbv, v-half, v-min");
  CHECK(ScheduleChoice::parse("interleaved:2") ==
        ScheduleChoice{ScheduleChoice::Kind::interleaved, 2, {}});
  CHECK(ScheduleChoice::parse("file:s.txt").path == "s.txt");
  CHECK(ScheduleChoice{}.str() == "1f1b");
  CHECK_USAGE(ScheduleChoice::parse("2f2b"),
              "unknown schedule '2f2b': use gpipe, 1f1b, interleaved:V");
  CHECK_USAGE(ScheduleChoice::parse("interleaved:0"), "V must be an integer >= 1");
  CHECK_USAGE(ScheduleChoice::parse("interleaved:x"), "as in interleaved:2");
  CHECK_USAGE(ScheduleChoice::parse("file:"), "names no file");
}

TEST_CASE("PartitionMethod and CostSource: parse, print back, refuse") {
  for (const char* text : {"uniform", "params", "time", "memory", "layout:3,3,2", "layout:8"})
    CHECK(PartitionMethod::parse(text).str() == text);
  CHECK(PartitionMethod::parse("layout:4,1").layout == std::vector<int>{4, 1});
  CHECK_USAGE(PartitionMethod::parse("fastest"),
              "unknown partition method 'fastest': use one of uniform");
  CHECK_USAGE(PartitionMethod::parse("layout:3,x"), "'x' is not a number");
  for (const char* text : {"estimate", "profile"}) CHECK(CostSource::parse(text).str() == text);
  CHECK_USAGE(CostSource::parse("guess"), "unknown --costs 'guess': use estimate or profile");
}

namespace {

Model small_mlp() {
  return ModelBuilder({8}).linear(16).relu().linear(16).relu().linear(3).cross_entropy().build();
}

TrainerConfig sgd() {
  TrainerConfig c;
  c.optimizer.lr = 0.1f;
  return c;
}

}  // namespace

TEST_CASE("make_training: a 2-stage pipeline on two CPU devices learns") {
  const int64_t B = 32;
  Dataset data = test::synthetic_dataset(B, Shape{8}, 3, 5);
  for (int64_t i = 0; i < B;
       ++i) {  // an easy rule, so that 20 steps visibly learn: the largest of x[0..2]
    const float* f = &data.inputs[static_cast<size_t>(i * 8)];
    data.labels[static_cast<size_t>(i)] =
        f[0] > f[1] ? (f[0] > f[2] ? 0 : 2) : (f[1] > f[2] ? 1 : 2);
  }
  const Tensor x = Tensor::borrow(data.inputs.data(), data.sample_shape.with_batch(B));
  const Tensor y = Tensor::borrow(data.labels.data(), Shape{B}, DType::i32);

  TrainingOptions opt;
  opt.devices = "cpu:0,cpu:1";
  opt.threads = 1;
  opt.stages = 2;
  opt.microbatches = 4;
  opt.schedule = ScheduleChoice::parse("zb-h1");
  opt.partition = PartitionMethod::parse("layout:3,2");
  opt.print = false;
  Model model = small_mlp();
  TrainingRun run = make_training(opt, model, small_mlp, sgd(), B);
  REQUIRE(run.engine);
  REQUIRE(run.pipeline);
  REQUIRE(run.plan);
  CHECK(run.plan->partition.layout() == std::vector<int>{3, 2});
  CHECK(run.plan->schedule_name == "zb-h1");
  CHECK(run.backends.size() == 2);
  const double first = run.engine->train_step(x, y).loss;
  double last = first;
  for (int i = 0; i < 20; ++i) last = run.engine->train_step(x, y).loss;
  CHECK(last < 0.9 * first);
  CHECK(run.engine->step() == 21);
}

TEST_CASE(
    "make_training: one device is the Trainer; plan_only builds no engine; bad options say why") {
  Model model = small_mlp();
  TrainingOptions opt;
  opt.devices = "cpu:0";
  opt.threads = 1;
  opt.print = false;
  TrainingRun one = make_training(opt, model, small_mlp, sgd(), 8);
  CHECK(dynamic_cast<Trainer*>(one.engine.get()) != nullptr);
  CHECK(!one.plan);

  opt.devices = "cpu:0,cpu:1";
  opt.stages = 2;
  opt.plan_only = true;
  TrainingRun plan = make_training(opt, model, small_mlp, sgd(), 8);
  CHECK(!plan.engine);
  CHECK(plan.plan);

  opt.plan_only = false;
  opt.devices = "cpu:0";
  CHECK_USAGE(make_training(opt, model, small_mlp, sgd(), 8),
              "lists 1 device but --stages 2 x --dp 1 needs 2");
  opt.devices = "cpu:0,cpu:1";
  opt.microbatches = 16;
  CHECK_USAGE(make_training(opt, model, small_mlp, sgd(), 8),
              "--microbatches 16 is more than the --batch of 8");
  opt.microbatches = 2;
  TrainerConfig three = sgd();
  three.microbatches = 3;
  CHECK_USAGE(make_training(opt, model, small_mlp, three, 8),
              "the trainer's config says 3 micro-batches");
}

TEST_CASE("make_training: dualpipev on one device is the V's two stages; M < 2D is refused") {
  Model model = small_mlp();
  TrainingOptions opt;
  opt.devices = "cpu:0";
  opt.threads = 1;
  opt.print = false;
  opt.schedule = ScheduleChoice::parse("dualpipev");
  opt.microbatches = 2;
  TrainingRun run = make_training(opt, model, small_mlp, sgd(), 8);
  REQUIRE(run.plan);
  CHECK(run.plan->schedule.num_stages == 2);
  CHECK(run.plan->schedule.stage_device == std::vector<int>{0, 0});
  CHECK(dynamic_cast<Trainer*>(run.engine.get()) == nullptr);
  opt.microbatches = 1;
  CHECK_USAGE(make_training(opt, model, small_mlp, sgd(), 8),
              "--schedule dualpipev with --stages 1 --microbatches 1: dualpipev schedule needs at "
              "least 2 micro-batches per device, M >= 2D");
  opt.devices = "cpu:0,cpu:1";
  opt.stages = 2;
  opt.microbatches = 3;
  CHECK_USAGE(make_training(opt, model, small_mlp, sgd(), 8), "use 4 or more micro-batches");
  // A parameter server's worker holds one stage so far; the V has two on every device.
  TrainingOptions ps;
  ps.ps = 1;
  ps.schedule = ScheduleChoice::parse("dualpipev");
  CHECK_USAGE(ps.check(64), "--ps with --schedule dualpipev: a V puts two stages on every worker");
}

TEST_CASE("TrainingOptions::check: every number in its stated range, before any work") {
  const auto refused = [](auto set, const std::string& text) {
    TrainingOptions o;
    set(o);
    CHECK_USAGE(o.check(64), text.c_str());
  };
  const double inf = std::numeric_limits<double>::infinity();
  const int cores = available_cores();
  refused([](TrainingOptions& o) { o.threads = -1; },
          "--threads -1 must be an integer between 0 and");
  refused([&](TrainingOptions& o) { o.threads = 4 * cores + 1; },
          "(4 x the " + std::to_string(cores) + " cores of this machine");
  refused([&](TrainingOptions& o) { o.timeout_s = inf; },
          "--timeout inf must be a finite number > 0 and <= 1000000");
  refused([](TrainingOptions& o) { o.timeout_s = 1e10; }, "--timeout 10000000000 must be");
  refused([](TrainingOptions& o) { o.timeout_s = 0; }, "--timeout 0 must be");
  refused([&](TrainingOptions& o) { o.bucket_mib = inf; },
          "--bucket-mb inf must be a finite number > 0");
  refused([](TrainingOptions& o) { o.bucket_mib = 0; }, "--bucket-mb 0 must be");
  refused([](TrainingOptions& o) { o.mem_cap_mib = -1; },
          "--mem-cap -1 must be a finite number >= 0");
  refused([](TrainingOptions& o) { o.mem_cap_mib = std::nan(""); }, "--mem-cap nan");
  refused([](TrainingOptions& o) { o.stages = 0; }, "--stages 0 must be an integer >= 1");
  TrainingOptions o;
  CHECK_USAGE(o.check(0), "--batch 0 must be an integer >= 1");
  o.threads = 4 * cores;  // the bound itself is allowed
  o.timeout_s = 1e6;
  CHECK_NOTHROW(o.check(64));
}

// --plan auto runs what it chose through options_for_plan. No example makes a fully sharded plan
// win (tensor parallelism or a pipeline holds as little without gathers), so the mapping of one
// is checked here: the flags say it, the options run it as priced (units dropped after the
// forward, one reduce-scatter a step, no prefetch), and that run is --dp 2's, bit for bit.
TEST_CASE("options_for_plan: a fully sharded plan runs as the planner priced it") {
  const int64_t B = 16;
  const Dataset data = test::synthetic_dataset(B, Shape{8}, 3, 5);
  const Tensor x =
      Tensor::borrow(const_cast<float*>(data.inputs.data()), data.sample_shape.with_batch(B));
  const Tensor y = Tensor::borrow(const_cast<int32_t*>(data.labels.data()), Shape{B}, DType::i32);
  TrainingOptions given;
  given.devices = "cpu:0,cpu:1";
  given.threads = 1;
  given.plan_auto = true;
  given.print = false;
  PlanCandidate chosen;
  chosen.stages = 1;
  chosen.replicas = 2;
  chosen.microbatches = 2;
  chosen.schedule = "1f1b";
  chosen.layout = {5};
  chosen.shard = ShardChoice::full;
  DeviceSet devices = open_devices("cpu:0", 1, 1);
  const auto planned =
      options_for_plan(given, chosen, ScheduleChoice::parse("1f1b"), *devices.backends[0]);
  const TrainingOptions& options = planned.first;
  const std::string& flags = planned.second;
  CHECK(flags.find("--dp 2") != std::string::npos);
  CHECK(flags.find("--shard full --reshard-after-forward true --shard-reduce step") !=
        std::string::npos);
  CHECK_FALSE(options.plan_auto);
  CHECK(options.shard_full);
  CHECK(options.resolved_reshard_after_forward());
  CHECK_FALSE(options.resolved_reduce_every_microbatch());
  CHECK_FALSE(options.shard_prefetch);

  TrainingOptions plain = options;
  plain.shard_full = false;
  plain.reshard_after_forward.reset();
  plain.shard_reduce_every_microbatch.reset();
  std::vector<double> sharded_losses, plain_losses;
  for (const auto& [o, losses] : {std::pair{&options, &sharded_losses}, {&plain, &plain_losses}}) {
    Model model = small_mlp();
    TrainingRun run = make_training(*o, model, small_mlp, sgd(), B);
    REQUIRE(run.engine);
    for (int i = 0; i < 4; ++i) losses->push_back(run.engine->train_step(x, y).loss);
  }
  for (const double l : sharded_losses) CHECK(std::isfinite(l));
  CHECK(sharded_losses.back() < sharded_losses.front());
  CHECK(sharded_losses == plain_losses);
}
