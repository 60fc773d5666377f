// The pipeline does not zero gradients before a step: each layer's first weight gradient of the
// step writes them (StageParameters::start_gradients; B or W, whichever runs first), and an
// asynchronous stage starts over after each UPDATE. NaN put into every stage's gradients
// between steps must not reach the parameters, which must equal an untouched run's bit for bit
// (a step that added to the previous step's gradients would differ from it, too).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "engine/setup/training_run.h"
#include "pipeline_test_util.h"
#include "ps_test_util.h"

using namespace pt;
using namespace pt::test;

namespace {

std::vector<float> all_params(TrainingEngine& engine) {
  std::vector<float> out;
  for (const auto& [name, v] : params_by_name(engine.stage_states()))
    out.insert(out.end(), v.begin(), v.end());
  return out;
}

void poison_gradients(TrainingEngine& engine) {
  // Every tensor's gradient (the arena's alignment padding between them is never written).
  for (const StageState& s : engine.stage_states())
    for (size_t e = 0; e < s.params->entries().size(); ++e) {
      const Tensor g = s.params->grad(e);
      s.params->backend().fill(g.f32(), std::numeric_limits<float>::quiet_NaN(), g.numel());
    }
}

}  // namespace

TEST_CASE("pipeline steps write their gradients: NaN left in them between steps does not leak") {
  struct Case {
    std::string schedule;
    bool async;
  };
  for (const Case& c : {Case{"1f1b", false}, Case{"zb-h1", false}, Case{"interleaved:2", false},
                        Case{"1f1b", true}}) {
    CAPTURE(c.schedule);
    CAPTURE(c.async);
    const int64_t batch = 24;
    const PsData data(batch);
    std::vector<std::vector<float>> params;
    for (bool poison : {false, true}) {
      TrainingOptions opt;
      opt.devices = "cpu:0..1";
      opt.threads = 1;
      opt.stages = 2;
      opt.microbatches = 4;
      opt.schedule = ScheduleChoice::parse(c.schedule);
      opt.async_update = c.async;
      opt.force_pipeline = true;
      opt.print = false;
      Model model = ps_small_mlp();
      TrainingRun run = make_training(opt, model, ps_small_mlp,
                                      ps_trainer_config("sgd", false, /*clip=*/0.f), batch);
      for (int step = 0; step < 3; ++step) {
        if (poison) poison_gradients(*run.engine);
        run.engine->train_step(data.x, data.y);
      }
      params.push_back(all_params(*run.engine));
    }
    size_t nan = 0;
    for (float v : params[1]) nan += std::isnan(v) ? 1 : 0;
    CHECK(nan == 0);
    REQUIRE(params[0].size() == params[1].size());
    CHECK(std::memcmp(params[0].data(), params[1].data(), params[0].size() * sizeof(float)) == 0);
  }
}
