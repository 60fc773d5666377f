// bench/memory: the resident memory of a long training run, and whether it grows. Trains the
// Fashion-MNIST MLP (synthetic batches; memory does not depend on the values) for --steps steps,
// on one device and as a 2-stage pipeline (1F1B, traces recorded as the examples record them),
// sampling the process's resident size every --every steps. One JSON line per configuration:
//
//   {"bench":"memory", "config":"1 device"|"2 stages", "steps", "batch", "step_ms_median",
//    "peak_rss_mib"            the kernel's high-water mark over this configuration's run
//    "rss_warm_mib"            resident after --warmup steps (buffers, caches and pools sized)
//    "rss_end_mib"             resident after the last step
//    "growth_mib"              rss_end - rss_warm: the target is 0 (a page or two of noise)
//    "growth_second_half_mib"  rss_end - resident at step steps/2 (a one-off late allocation
//                              shows in growth_mib only; a leak in both)
//    "slope_kib_per_1k_steps"  least-squares slope of the samples after warm-up
//    "device_live_growth_bytes"  the engine's own accounting (live tensor bytes of every
//                                device) after the last step minus after warm-up: exactly 0
//                                unless tensors leak}
// With --samples, also {"bench":"memory_sample", "config", "step", "rss_mib"} per sample.
#include <algorithm>
#include <chrono>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/json_line.h"
#include "bench/repeated_seconds.h"
#include "bench/synthetic_batch.h"
#include "engine/report/resident_memory.h"
#include "engine/setup/training_run.h"
#include "layers/zoo.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kMiB = 1 << 20;

// Least-squares slope of y over x.
double slope(const std::vector<double>& x, const std::vector<double>& y) {
  const auto n = static_cast<double>(x.size());
  if (x.size() < 2) return 0;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sx += x[i];
    sy += y[i];
    sxx += x[i] * x[i];
    sxy += x[i] * y[i];
  }
  const double d = n * sxx - sx * sx;
  return d == 0 ? 0 : (n * sxy - sx * sy) / d;
}

size_t device_live_bytes(const pt::TrainingRun& run) {
  size_t live = 0;
  for (const pt::Backend* b : run.backends) live += b->memory_stats().current_bytes;
  return live;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pipetrain-bench-memory: resident memory of a long training run (JSON lines)"};
  int64_t steps = 2000, warmup = 200, every = 50, batch = 32;
  int microbatches = 4;
  bool samples = false;
  std::vector<int> stages{1, 2};
  app.add_option("--steps", steps, "training steps per configuration")->capture_default_str();
  app.add_option("--warmup", warmup, "steps before the reference sample")->capture_default_str();
  app.add_option("--every", every, "steps between samples")->capture_default_str();
  app.add_option("--batch", batch)->capture_default_str();
  app.add_option("--microbatches", microbatches, "M of the pipeline")->capture_default_str();
  app.add_option("--stages", stages, "configurations: 1 = one device, S = S stages")
      ->capture_default_str();
  app.add_flag("--samples", samples, "print every sample too");
  CLI11_PARSE(app, argc, argv);
  if (steps < 1 || warmup < 1 || warmup >= steps || every < 1) {
    fmt::print(stderr, "--steps must be >= 1, --warmup in [1, --steps), --every >= 1\n");
    return 2;
  }

  pt::bench::Batch data(batch);
  for (int S : stages) {
    pt::TrainingOptions opt;
    opt.devices = S == 1 ? "cpu:0" : fmt::format("cpu:0..{}", S - 1);
    opt.threads = 1;
    opt.stages = S;
    opt.microbatches = S == 1 ? 1 : microbatches;
    opt.print = false;
    pt::Model model = pt::fashion_mlp();
    const std::string config = S == 1 ? "1 device" : fmt::format("{} stages", S);
    const bool peak_reset = pt::reset_peak_resident();
    std::vector<double> ms, at_step, rss;
    size_t rss_warm = 0, rss_half = 0, live_warm = 0;
    {
      pt::TrainingRun run = pt::make_training(opt, model, pt::fashion_mlp,
                                              pt::bench::sgd_config(opt.microbatches), batch);
      for (int64_t step = 1; step <= steps; ++step) {
        const auto t0 = Clock::now();
        run.engine->train_step(data.hx, data.hy);
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        const int64_t half = std::max(warmup, steps / 2);
        if (step == warmup || step == half || (step > warmup && step % every == 0) ||
            step == steps) {
          const size_t r = pt::resident_bytes();
          if (step == half) rss_half = r;
          if (step == warmup) {
            rss_warm = r;
            live_warm = device_live_bytes(run);
          }
          at_step.push_back(static_cast<double>(step));
          rss.push_back(static_cast<double>(r) / kMiB);
          if (samples)
            pt::bench::emit({{"bench", "memory_sample"},
                             {"config", config},
                             {"step", step},
                             {"rss_mib", static_cast<double>(r) / kMiB}});
        }
      }
      const size_t live_end = device_live_bytes(run);
      const pt::bench::Spread step_ms = pt::bench::spread_of(ms);
      pt::bench::emit(
          {{"bench", "memory"},
           {"config", config},
           {"model", "fashion_mlp"},
           {"steps", steps},
           {"batch", batch},
           {"microbatches", int64_t{opt.microbatches}},
           {"step_ms_median", step_ms.median},
           {"peak_rss_mib", static_cast<double>(pt::peak_resident_bytes()) / kMiB},
           {"peak_since_start", int64_t{peak_reset}},  // 0: the process's peak so far
           {"rss_warm_mib", static_cast<double>(rss_warm) / kMiB},
           {"rss_end_mib", rss.back()},
           {"growth_mib", rss.back() - static_cast<double>(rss_warm) / kMiB},
           {"growth_second_half_mib", rss.back() - static_cast<double>(rss_half) / kMiB},
           {"slope_kib_per_1k_steps", slope(at_step, rss) * 1024 * 1000},
           {"device_live_growth_bytes",
            static_cast<int64_t>(live_end) - static_cast<int64_t>(live_warm)}});
    }
  }
  return 0;
}
