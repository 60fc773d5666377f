#include "examples/common/parity_check.h"

#include <limits>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/compare.h"
#include "engine/core/error.h"
#include "kernels/cpu/cpu_backend.h"

namespace pt::examples {

namespace {

// Sets `index` to the reference's parameter of this name; false when it has none (a difference,
// not a crash).
bool find_entry(const StageParameters& params, const std::string& name, size_t& index) {
  const auto& entries = params.entries();
  for (index = 0; index < entries.size(); ++index)
    if (entries[index].name == name) return true;
  return false;
}

}  // namespace

int parity_check(const TrainingOptions& par, const std::function<Model()>& make_model,
                 TrainerConfig config, TrainingEngine& pipelined, int threads, Communicator* world,
                 const std::function<void(TrainingEngine& reference)>& train_same_batches) {
  fmt::print("parity check: training the single-device reference on the same batches...\n");
  const bool exact = par.dp == 1 || (par.dp == 2 && config.microbatches == 1);
  config.microbatches *= par.dp;
  Model reference_model = make_model();
  auto backend = make_cpu_backend(par.stages, threads);  // same threads: same GEMM arithmetic
  backend->bind_current_thread();
  Trainer reference(reference_model, *backend, config);
  train_same_batches(reference);
  if (reference.step() != pipelined.step())
    throw UsageError(fmt::format(
        "--parity-check: the reference took {} steps but the run is at step {}; --parity-check "
        "does not combine with --resume: it replays the run from the start",
        reference.step(), pipelined.step()));

  double worst = 0;
  size_t differing = 0, tensors = 0, with_nan = 0;
  for (const StageState& s : pipelined.stage_states())
    for (size_t i = 0; i < s.params->entries().size(); ++i) {
      const std::string& name = s.params->entries()[i].name;
      const Tensor a = s.params->param(i);
      size_t j = 0;
      ++tensors;
      if (!find_entry(reference.parameters(), name, j)) {
        fmt::print("  {:<24} missing in the reference\n", name);
        worst = std::numeric_limits<double>::infinity();
        ++differing;
        continue;
      }
      const Tensor b = reference.parameters().param(j);
      const TensorDiff d = compare_tensors(std::span(a.f32(), static_cast<size_t>(a.numel())),
                                           std::span(b.f32(), static_cast<size_t>(b.numel())));
      fmt::print("  {:<24} max |pipeline - reference| = {:.3g}{}\n", name, d.max_abs,
                 d.nan_count ? fmt::format(" ({} NaN of {})", d.nan_count, d.elements) : "");
      if (!(d.max_abs <= worst)) worst = d.max_abs;
      differing += !d.identical();
      with_nan += d.nan_count > 0;
    }
  if (world) {
    double v[3] = {static_cast<double>(differing), static_cast<double>(tensors),
                   static_cast<double>(with_nan)};
    world->all_reduce(v, 3, ElemType::f64, ReduceOp::sum, "the parity verdicts");
    differing = static_cast<size_t>(v[0]);
    tensors = static_cast<size_t>(v[1]);
    with_nan = static_cast<size_t>(v[2]);
    double w = worst;  // the largest difference anywhere: max via the largest of all ranks
    std::vector<double> all(static_cast<size_t>(world->size()));
    world->all_gather(&w, all.data(), sizeof(double), "the parity verdicts");
    for (double x : all)
      if (!(x <= worst)) worst = x;
  }
  if (differing == 0) {
    fmt::print("parity: all {} tensors are bit-identical to the single-device reference\n",
               tensors);
    return 0;
  }
  if (with_nan) {
    fmt::print(
        "parity: {} of {} tensors differ and {} hold NaN (in the pipeline's run, the "
        "reference's or both): FAILED\n",
        differing, tensors, with_nan);
    return kExitParityFailed;
  }
  fmt::print("parity: {} of {} tensors differ; the largest difference is {:.3g}", differing,
             tensors, worst);
  if (exact) {
    fmt::print(" but they should be bit-identical (same addition order)\n");
    return kExitParityFailed;
  }
  const bool ok = worst <= kParityTolerance;
  fmt::print(
      " ({} the tolerance {:g}: {} replicas add their {} micro-batch gradients in another "
      "grouping)\n",
      ok ? "within" : "OVER", kParityTolerance, par.dp, config.microbatches / par.dp);
  return ok ? 0 : kExitParityFailed;
}

}  // namespace pt::examples
