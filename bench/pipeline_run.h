#pragma once
// One measurement of bench/pipeline (pipeline.cpp says what it prints): a schedule at M
// micro-batches planned, timed on S one-core CPU devices, checked against the single-device
// baseline and compared with the simulator. pipeline.cpp runs it for every (schedule, M).
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/repeated_seconds.h"
#include "bench/synthetic_batch.h"
#include "engine/core/backend.h"
#include "engine/partition/cost_source.h"
#include "engine/partition/layer_costs.h"
#include "layers/model.h"

namespace pt::bench::pipeline {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();  // json_line writes null

struct Flags {
  std::string model = "mlp";
  int64_t batch = 256;
  int stages = 2;  // S devices of 1 core each
  int steps = 10, warmup = 3;
  std::vector<int> microbatches{1, 2, 4, 8, 16};
  std::vector<std::string> schedules{"gpipe", "1f1b", "zb-h1", "interleaved:2"};
  std::string costs = "estimate";  // for the partitioner: estimate | profile
  int profile_repeats = 5;
  bool quick = false;
};

pt::Model make_model(const std::string& name);

// ---- timing ------------------------------------------------------------------------------------

struct Timed {
  Spread step_s;               // median, min and max of the timed steps
  int median_step = 0;         // index (among the timed steps) of the step at the median
  std::vector<double> losses;  // every step's loss, warm-up included
};

Timed time_single_device(const Flags& f, const Batch& batch, int M, int threads);

// ---- profiled costs ----------------------------------------------------------------------------

// Per-layer F/I/W of one micro-batch, one profile per micro-batch size: timed on the S 1-thread
// CPU devices at once, each running one stage-sized chunk of the layers (profile_costs_together).
class Profiles {
 public:
  explicit Profiles(const Flags& f);

  const std::vector<pt::LayerProfile>& at(int64_t microbatch);
  // The same profiles for the partition (make_plan) as for the simulated figures.
  pt::LayerProfiler profiler();

 private:
  const Flags& flags_;
  std::vector<std::unique_ptr<pt::Backend>> owned_;
  std::vector<pt::Backend*> devices_;
  std::map<int64_t, std::vector<pt::LayerProfile>> cache_;
};

// ---- one pipeline run ---------------------------------------------------------------------------

struct Baseline {
  Spread one_core_s, threads_s;
  std::vector<double> losses;  // the 1-core reference's
};

struct RunResult {
  std::string schedule;
  int M = 0;
  Spread step_s, speedup_over_ideal;
  double predicted_over_measured = kNaN;
  double bubble_err_pp_max = 0, bubble_err_vs_sim_pp_max = 0;  // largest |error| over the devices
  double sim_equal_s = kNaN, sim_profiled_s = kNaN;
  std::vector<size_t> peak_bytes;
  std::vector<int> inflight;
  std::vector<int64_t> predicted_peak_bytes;
  int wrong = 0;
};

inline double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

// Plans, runs and reports one (schedule, M); std::nullopt when the schedule is not valid for M.
std::optional<RunResult> run_pipeline(const Flags& f, pt::CostSource cost_source,
                                      const Batch& batch, Profiles& profiles,
                                      const std::string& schedule, int M, const Baseline& base);

}  // namespace pt::bench::pipeline
