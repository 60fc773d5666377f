#pragma once
// What the pipeline tests share: CPU devices, a validated lowered schedule with an even split of
// the layers, and the parameters of every stage by checkpoint name (for bit-for-bit comparisons).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../engine/synthetic.h"
#include "engine/data/batching.h"
#include "engine/pipeline/pipeline_trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "schedule/generators.h"
#include "schedule/lowering.h"
#include "schedule/validate.h"

namespace pt::test {

// n CPU devices of one thread each (cpu:first .. cpu:first+n-1).
struct CpuDevices {
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> devices;
  explicit CpuDevices(int n, int first = 0) {
    for (int d = 0; d < n; ++d) {
      owned.push_back(make_cpu_backend(first + d, 1));
      devices.push_back(owned.back().get());
    }
  }
};

// `schedule` over D devices with M micro-batches, lowered and validated; layers split evenly.
inline PipelineConfig pipeline_config(const Model& m, const TrainerConfig& trainer,
                                      const std::string& schedule, int D, int M,
                                      double timeout_s = 20) {
  PipelineConfig pc;
  pc.trainer = trainer;
  pc.schedule = sched::add_communication(sched::generate(schedule, D, M));
  sched::require_valid(pc.schedule);
  const auto sizes = split_sizes(m.num_layers(), pc.schedule.num_stages);
  pc.layers_per_stage.assign(sizes.begin(), sizes.end());
  pc.timeout_s = timeout_s;
  return pc;
}

// Every parameter of the given stages, by checkpoint name.
inline std::map<std::string, std::vector<float>> params_by_name(
    const std::vector<StageState>& stages) {
  std::map<std::string, std::vector<float>> out;
  for (const StageState& s : stages)
    for (size_t i = 0; i < s.params->entries().size(); ++i) {
      const Tensor t = s.params->param(i);
      out[s.params->entries()[i].name].assign(t.f32(), t.f32() + t.numel());
    }
  return out;
}

// One synthetic batch (`batch` samples of `sample`, 10 classes, drawn with `seed`) and the
// inputs x and labels y borrowing it: the data of most parity tests.
struct SyntheticBatch {
  Dataset set;
  Tensor x, y;
  SyntheticBatch(int64_t batch, Shape sample, uint64_t seed = 4)
      : set(synthetic_dataset(batch, sample, 10, seed)) {
    x = Tensor::borrow(set.inputs.data(), sample.with_batch(batch));
    y = Tensor::borrow(set.labels.data(), Shape{batch}, DType::i32);
  }
};

}  // namespace pt::test
