#include "examples/common/parity_check.h"

#include <unistd.h>

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/checkpoint/checkpoint.h"
#include "engine/core/error.h"
#include "engine/report/compare.h"
#include "kernels/cpu/cpu_backend.h"

namespace pt::examples {

namespace {

// The reference's parameter of this name, or nullptr (a difference, not a crash).
const ParameterEntry* find_entry(const StageParameters& params, const std::string& name,
                                 size_t& index) {
  const auto& entries = params.entries();
  for (index = 0; index < entries.size(); ++index)
    if (entries[index].name == name) return &entries[index];
  return nullptr;
}

// One folder name for all ranks: rank 0's process id decides.
std::filesystem::path state_folder(Communicator* world) {
  int64_t pid = ::getpid();
  if (world) {
    std::vector<int64_t> all(static_cast<size_t>(world->size()));
    world->all_gather(&pid, all.data(), sizeof(int64_t), "the parity check's folder name");
    pid = all[0];
  }
  return std::filesystem::temp_directory_path() / fmt::format("pipetrain-parity-{}", pid);
}

}  // namespace

ParityCheckedEngine::ParityCheckedEngine(TrainingEngine& run, const TrainingOptions& par,
                                         const std::function<Model()>& make_model,
                                         TrainerConfig config, int threads, Communicator* world)
    : ForwardingEngine(run),
      world_(world),
      exact_(par.tp == 1 && (par.dp == 1 || (par.dp == 2 && config.microbatches == 1))),
      replicas_(par.dp),
      tensor_ranks_(par.tp),
      microbatches_per_replica_(config.microbatches),
      state_dir_(state_folder(world)),
      reference_model_(make_model()) {
  config.microbatches *= par.dp;
  backend_ = make_cpu_backend(par.stages, threads);  // same threads: same GEMM arithmetic
  reference_ = std::make_unique<Trainer>(reference_model_, *backend_, config);
}

ParityCheckedEngine::~ParityCheckedEngine() {
  std::error_code ec;
  if (!world_ || world_->rank() == 0) std::filesystem::remove_all(state_dir_, ec);
}

StepStats ParityCheckedEngine::train_step(const Tensor& inputs, const Tensor& targets) {
  TrainingState state;
  state.step = inner().step();
  state.seed = inner().seed();
  save_checkpoint(state_dir_, inner().model(), inner().stages_to_save(), state, world_);
  backend_->bind_current_thread();
  const StageState reference_state{&reference_->parameters(), &reference_->optimizer()};
  load_checkpoint(state_dir_, reference_model_, std::span(&reference_state, 1));
  reference_->set_step(inner().step());

  const StepStats stats = inner().train_step(inputs, targets);
  backend_->bind_current_thread();
  reference_->train_step(inputs, targets);
  compare_after_step();
  return stats;
}

void ParityCheckedEngine::compare_after_step() {
  ++steps_checked_;
  for (const StageState& s : inner().stage_states())
    for (size_t i = 0; i < s.params->entries().size(); ++i) {
      const std::string& name = s.params->entries()[i].name;
      Worst& w = worst_[name];
      size_t j = 0;
      if (!find_entry(reference_->parameters(), name, j)) {
        w = {std::numeric_limits<double>::infinity(), inner().step(), false};
        continue;
      }
      const Tensor a = s.params->param(i);
      const Tensor b = reference_->parameters().param(j);
      const TensorDiff d = compare_tensors(std::span(a.f32(), static_cast<size_t>(a.numel())),
                                           std::span(b.f32(), static_cast<size_t>(b.numel())));
      if (d.nan_count && !w.nan)
        w = {std::numeric_limits<double>::infinity(), inner().step(), true};
      if (!w.nan && d.max_abs > w.max_abs) w = {d.max_abs, inner().step(), false};
    }
}

int ParityCheckedEngine::verdict() {
  double worst = 0;
  size_t differing = 0, tensors = 0, with_nan = 0;
  for (const auto& [name, w] : worst_) {
    ++tensors;
    differing += w.max_abs != 0.0;
    with_nan += w.nan;
    if (!(w.max_abs <= worst)) worst = w.max_abs;
    if (w.nan)
      fmt::print("  {:<24} NaN after step {}\n", name, w.step);
    else if (w.max_abs == std::numeric_limits<double>::infinity())
      fmt::print("  {:<24} missing in the reference\n", name);
    else
      fmt::print("  {:<24} max |run - reference| = {:.3g}{}\n", name, w.max_abs,
                 w.max_abs > 0 ? fmt::format(" (after step {})", w.step) : "");
  }
  if (world_) {
    double v[3] = {static_cast<double>(differing), static_cast<double>(tensors),
                   static_cast<double>(with_nan)};
    world_->all_reduce(v, 3, ElemType::f64, ReduceOp::sum, "the parity verdicts");
    differing = static_cast<size_t>(v[0]);
    tensors = static_cast<size_t>(v[1]);
    with_nan = static_cast<size_t>(v[2]);
    double w = worst;  // the largest difference anywhere: max via the largest of all ranks
    std::vector<double> all(static_cast<size_t>(world_->size()));
    world_->all_gather(&w, all.data(), sizeof(double), "the parity verdicts");
    for (double x : all)
      if (!(x <= worst)) worst = x;
  }
  const std::string checked = fmt::format("{} step{}, each from the run's own state",
                                          steps_checked_, steps_checked_ == 1 ? "" : "s");
  if (steps_checked_ == 0) {
    fmt::print("parity: no step was trained, nothing to compare\n");
    return 0;
  }
  if (differing == 0) {
    fmt::print("parity: all {} tensors are bit-identical to the single-device reference ({})\n",
               tensors, checked);
    return 0;
  }
  if (with_nan) {
    fmt::print(
        "parity: {} of {} tensors differ and {} hold NaN (in the run, the reference or both; "
        "{}): FAILED\n",
        differing, tensors, with_nan, checked);
    return kExitParityFailed;
  }
  fmt::print("parity: {} of {} tensors differ; the largest difference after one step is {:.3g}",
             differing, tensors, worst);
  if (exact_) {
    fmt::print(" but they should be bit-identical (same addition order; {})\n", checked);
    return kExitParityFailed;
  }
  const bool ok = worst <= kParityTolerance;
  fmt::print(
      " ({} the tolerance {:g}: {}; {})\n", ok ? "within" : "OVER", kParityTolerance,
      tensor_ranks_ > 1
          ? fmt::format("{} tensor ranks add partial sums of the split layers", tensor_ranks_)
          : fmt::format("{} replicas add their {} micro-batch gradients in another grouping",
                        replicas_, microbatches_per_replica_),
      checked);
  return ok ? 0 : kExitParityFailed;
}

}  // namespace pt::examples
