#include "engine/partition/step_overheads.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <functional>
#include <string>

#include <fmt/format.h>

#include "engine/comm/in_process.h"
#include "engine/core/arena.h"
#include "engine/core/error.h"
#include "engine/parallel/all_reduce_gradients.h"
#include "engine/partition/on_every_device.h"
#include "engine/report/median.h"

namespace pt {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

StepOverheads estimate_step_overheads(int optimizer_slots, double bytes_per_second) {
  const double per_param = sizeof(float) / bytes_per_second;
  StepOverheads o;
  o.serial_s_per_param = per_param;                                // the norm reads
  o.update_s_per_param = (3 + 2.0 * optimizer_slots) * per_param;  // p, g, state in; p, state out
  return o;
}

StepOverheads measure_step_overheads(const std::vector<Backend*>& devices,
                                     const OptimizerConfig& optimizer, int64_t params,
                                     int repeats) {
  if (params < 1 || repeats < 1 || devices.empty())
    throw UsageError(fmt::format(
        "measuring the step's overheads needs >= 1 device, parameter and repeat (got {}, {}, {})",
        devices.size(), params, repeats));
  std::vector<double> serial(devices.size()), update(devices.size());
  on_every_device(devices, [&](size_t d, std::barrier<>& together) {
    Backend& b = *devices[d];
    SizeTable table;
    table.add("measured", Shape{params});
    const Arena p(b, table), g(b, table);
    Optimizer opt(optimizer, b, table);
    const Tensor pf = p.flat(), gf = g.flat();
    std::vector<double> norm, step;
    for (int r = -1; r < repeats; ++r) {  // r = -1: the warm-up (first touch, state allocation)
      b.fill(gf.f32(), 0.f, params);      // gradients to read (a step's weight gradients write)
      together.arrive_and_wait();
      const auto t0 = Clock::now();
      static_cast<void>(b.sum_squares(gf.f32(), params));
      b.synchronize();
      const auto t1 = Clock::now();
      opt.step(pf, gf, optimizer.lr);
      b.synchronize();
      const auto t2 = Clock::now();
      if (r < 0) continue;
      norm.push_back(std::chrono::duration<double>(t1 - t0).count());
      step.push_back(std::chrono::duration<double>(t2 - t1).count());
    }
    serial[d] = median_of(norm) / static_cast<double>(params);
    update[d] = median_of(step) / static_cast<double>(params);
  });
  StepOverheads o;
  for (size_t d = 0; d < devices.size(); ++d) {
    o.serial_s_per_param += serial[d] / static_cast<double>(devices.size());
    o.update_s_per_param += update[d] / static_cast<double>(devices.size());
  }
  return o;
}

AllReduceRate measure_in_process_allreduce(const std::vector<Backend*>& devices, int64_t bytes,
                                           int repeats) {
  const int R = static_cast<int>(devices.size());
  if (R < 2 || bytes < 4 || repeats < 1)
    throw UsageError(fmt::format(
        "measuring the all-reduce needs >= 2 devices, 4 bytes and 1 repeat (got {}, {}, {})", R,
        bytes, repeats));
  const auto group = make_in_process_group(R, 60, "the planner's all-reduce measurement");
  // Per size (one float, then `bytes`): the slowest device's time of each round.
  const int64_t counts[2] = {1, bytes / static_cast<int64_t>(sizeof(float))};
  std::vector<std::vector<double>> slowest(2, std::vector<double>(static_cast<size_t>(repeats)));
  std::mutex merge;
  on_every_device(devices, [&](size_t d, std::barrier<>& together) {
    Backend& b = *devices[d];
    Tensor buffer = b.empty(Shape{counts[1]});
    b.fill(buffer.f32(), 1.f, counts[1]);
    std::vector<float> staging;
    for (int size = 0; size < 2; ++size)
      for (int r = -1; r < repeats; ++r) {
        together.arrive_and_wait();
        const auto t0 = Clock::now();
        all_reduce_gradients(b, *group[d], buffer.f32(), counts[size], staging,
                             "the planner's all-reduce measurement");
        b.synchronize();
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        if (r < 0) continue;
        const std::lock_guard lock(merge);
        double& worst = slowest[static_cast<size_t>(size)][static_cast<size_t>(r)];
        worst = std::max(worst, s);
      }
  });
  const double ring = 2.0 * (R - 1) / R;
  AllReduceRate rate;
  rate.latency_s = median_of(slowest[0]) / (2.0 * (R - 1));
  const double moving = std::max(median_of(slowest[1]) - 2.0 * (R - 1) * rate.latency_s, 1e-9);
  rate.bytes_per_second = ring * static_cast<double>(counts[1] * 4) / moving;
  return rate;
}

}  // namespace pt
