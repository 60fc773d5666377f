// CUDA timing events (Backend::record_timing_event): recording one does not wait for the GPU, and
// the time between two is the device's. A per-action trace is taken with them (Executor::run), so
// recording it must neither synchronise nor lose the device's own timing.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <vector>

#include "engine/core/backend.h"
#include "engine/devices/cuda_plugin.h"
#include "engine/pipeline/pipeline_trainer.h"
#include "layers/zoo.h"
#include "schedule/generators.h"
#include "schedule/lowering.h"
#include "tests/pipeline/pipeline_test_util.h"

using namespace pt;

TEST_CASE("cuda: timing events measure queued GPU work without waiting for it") {
  auto gpu = make_cuda_backend(0, 0, CudaPrecision::fp32);
  const int64_t n = 4096;  // 137 GFLOP per GEMM: milliseconds of device time each
  Tensor A = gpu->zeros({n, n}), B = gpu->zeros({n, n}), C = gpu->zeros({n, n});
  gpu->synchronize();
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const auto before = gpu->record_timing_event();
  for (int i = 0; i < 20; ++i)
    gpu->gemm(false, false, n, n, n, 1.f, A.f32(), n, B.f32(), n, 0.f, C.f32(), n);
  const auto after = gpu->record_timing_event();
  const double queued_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double device_s = after->seconds_since(*before);  // waits for `after`
  const double total_s = std::chrono::duration<double>(Clock::now() - t0).count();
  MESSAGE("20 GEMMs: queued in " << queued_s * 1e3 << " ms, device " << device_s * 1e3
                                 << " ms, host until done " << total_s * 1e3 << " ms");
  CHECK(device_s > 0);
  CHECK(device_s <= total_s);
  // The host went on while the GPU computed: recording did not synchronise.
  CHECK(queued_s < 0.5 * device_s);
}

TEST_CASE("cuda: a pipeline's trace holds every action once, in order, with sane times") {
  const int gpus = static_cast<int>(cuda_status().devices.size());
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> devices;
  for (int d = 0; d < 2; ++d) {
    owned.push_back(make_cuda_backend(gpus >= 2 ? d : 0, gpus >= 2 ? 0 : d, CudaPrecision::fp32));
    devices.push_back(owned.back().get());
  }
  Model m = deep_mlp(2, 256, {1, 28, 28});
  TrainerConfig tc;
  tc.microbatches = 4;
  tc.optimizer.kind = "sgd";
  tc.lr = {LrSchedule::Kind::constant, 0.01f, 0, 0, 0.f};
  PipelineConfig pc = test::pipeline_config(m, tc, "1f1b", 2, 4, 120);
  pc.record_trace = true;
  PipelineTrainer t(m, devices, pc);
  test::SyntheticBatch data(64, Shape{1, 28, 28});
  for (int i = 0; i < 2; ++i) t.train_step(data.x, data.y);
  const auto& trace = t.last_trace();
  REQUIRE(trace.size() == 2);
  for (size_t d = 0; d < 2; ++d) {
    const auto& list = pc.schedule.actions[d];
    REQUIRE(trace[d].size() == list.size());
    double last_end = 0;
    for (size_t i = 0; i < list.size(); ++i) {
      const ExecutedAction& e = trace[d][i];
      CHECK(e.action == list[i]);
      CHECK(e.start_us >= last_end - 1e-3);  // events on one stream complete in order
      CHECK(e.end_us >= e.start_us);
      last_end = e.end_us;
    }
    CHECK(last_end > 0);
  }
}
