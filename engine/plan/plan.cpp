#include "engine/plan/plan.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/partition/byte_count.h"
#include "engine/partition/stage_cost.h"
#include "engine/plan/recompute_cost.h"
#include "schedule/generators.h"
#include "schedule/lowering.h"
#include "schedule/text_format.h"
#include "schedule/validate.h"

namespace pt {

namespace {

sched::Schedule compute_schedule(const PlanRequest& r) {
  if (r.devices < 1) throw UsageError(fmt::format("--stages {} must be >= 1", r.devices));
  if (r.microbatches < 1)
    throw UsageError(fmt::format("--microbatches {} must be >= 1", r.microbatches));
  const int D = r.devices, M = r.microbatches;
  try {
    switch (r.schedule.kind) {
      case ScheduleChoice::Kind::gpipe: return sched::gpipe(D, M);
      case ScheduleChoice::Kind::one_f_one_b: return sched::one_f_one_b(D, M);
      case ScheduleChoice::Kind::interleaved: return sched::interleaved(D, M, r.schedule.chunks);
      case ScheduleChoice::Kind::zb_h1: return sched::zb_h1(D, M);
      case ScheduleChoice::Kind::zb_h2: return sched::zb_h2(D, M);
      case ScheduleChoice::Kind::zbv: return sched::zbv(D, M);
      case ScheduleChoice::Kind::v_half: return sched::v_half(D, M);
      case ScheduleChoice::Kind::v_min: return sched::v_min(D, M);
      case ScheduleChoice::Kind::dualpipev: return sched::dualpipev(D, M);
      case ScheduleChoice::Kind::file: break;
    }
  } catch (const std::invalid_argument& e) {  // the generator's devices are --stages
    throw UsageError(fmt::format("--schedule {} with --stages {} --microbatches {}: {}",
                                 r.schedule.str(), D, M, e.what()));
  }
  // A hand-written file: compute-only or already lowered (make_plan tells them apart).
  sched::Schedule s;
  try {
    s = sched::read_schedule_file(r.schedule.path);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  if (s.num_devices != D || s.microbatches != M)
    throw UsageError(
        fmt::format("schedule file {} is for {} devices and {} micro-batches, but the flags say "
                    "--stages {} --microbatches {}: make them agree",
                    r.schedule.path, s.num_devices, s.microbatches, D, M));
  return s;
}

// See PipelinePlan::device_peak_memory_bytes.
std::vector<int64_t> device_peak_memory(const sched::Schedule& schedule, const Partition& partition,
                                        const std::vector<LayerProfile>& costs,
                                        int optimizer_slots) {
  std::vector<long long> activations;
  std::vector<int64_t> out(static_cast<size_t>(schedule.num_devices), 0);
  for (size_t k = 0; k < partition.stages.size(); ++k) {
    const StagePlan& st = partition.stages[k];
    activations.push_back(stage_activation_bytes(costs, st.first_layer, st.last_layer));
    // Saturating (byte_count.h): a cost file's maxima overflow int64_t.
    int64_t& device = out[static_cast<size_t>(schedule.device_of(static_cast<int>(k)))];
    device = add_bytes(
        device, stage_memory_bytes(costs, st.first_layer, st.last_layer, 0, optimizer_slots));
  }
  const auto held = sched::peak_device_activation_bytes(schedule, activations);
  for (size_t d = 0; d < out.size(); ++d) out[d] = add_bytes(out[d], held[d]);
  return out;
}

// The cap is per device (--mem-cap): the partitioner checked each stage alone; a device holding
// several stages is checked here with what its schedule holds at once.
void check_device_memory(const PipelinePlan& plan, int64_t cap) {
  if (cap <= 0) return;
  const auto& peak = plan.device_peak_memory_bytes;
  const auto worst = std::max_element(peak.begin(), peak.end());
  if (*worst <= cap) return;
  const auto mib = [](int64_t b) {
    return fmt::format("{:.2f} MiB", static_cast<double>(b) / (1 << 20));
  };
  throw UsageError(fmt::format(
      "schedule '{}' makes device {} hold {} at its peak (its stages' parameters, gradients, "
      "optimizer state and the activations it holds at once), over --mem-cap {}: raise --mem-cap "
      "to at least {}, or use a schedule that holds fewer activations (v-half, v-min) or more "
      "--stages",
      plan.schedule_name, worst - peak.begin(), mib(*worst), mib(cap), mib(*worst)));
}

}  // namespace

double boundary_transfer_s(const PlanRequest& r, const sched::Schedule& schedule, int k,
                           double bytes) {
  if (r.device_links.empty()) return bytes / r.transfer_bytes_per_second + r.transfer_latency_s;
  if (k + 1 >= schedule.num_stages) return 0;
  const int a = schedule.device_of(k), b = schedule.device_of(k + 1);
  double slowest = 0;
  for (int d = std::min(a, b); d < std::max(a, b); ++d)
    slowest = std::max(slowest, r.device_links.at(static_cast<size_t>(d)).seconds(bytes));
  return slowest;
}

sched::Schedule lower_schedule(const sched::Schedule& compute, bool data_parallel,
                               const std::string& name) {
  // A file may hold a compute-only or an already lowered schedule; lower only the former.
  const bool lowered =
      std::any_of(compute.actions.begin(), compute.actions.end(), [](const auto& list) {
        return std::any_of(list.begin(), list.end(),
                           [](const sched::Action& a) { return sched::is_communication(a.type); });
      });
  sched::Schedule out = lowered ? compute : sched::add_communication(compute);
  const bool has_reduce = std::any_of(out.actions.begin(), out.actions.end(), [](const auto& list) {
    return std::any_of(list.begin(), list.end(), [](const sched::Action& a) {
      return a.type == sched::ActionType::REDUCE_GRAD;
    });
  });
  if (data_parallel && !has_reduce) out = sched::add_grad_reduction(out);
  const sched::Validation v = sched::validate(out);
  if (!v.ok()) throw UsageError(fmt::format("the schedule '{}' is not valid:\n{}", name, v.report));
  return out;
}

PipelinePlan plan_with_costs(sched::Schedule lowered, const std::vector<LayerProfile>& costs,
                             const PlanRequest& r, std::string schedule_name,
                             std::string costs_description) {
  PipelinePlan plan;
  plan.schedule = std::move(lowered);
  plan.schedule_name = std::move(schedule_name);
  plan.costs = std::move(costs_description);
  // Memory depends on how many micro-batches each stage holds at once: simulate with unit times.
  const sched::SimResult unit = sched::simulate(plan.schedule);
  PartitionRequest pr;
  pr.method = r.partition;
  pr.stages = plan.schedule.num_stages;
  pr.mem_cap_bytes = r.mem_cap_bytes;
  pr.inflight_per_stage = unit.peak_inflight;
  pr.optimizer_slots = r.optimizer_slots;
  plan.partition = partition(costs, pr);
  plan.device_peak_memory_bytes =
      device_peak_memory(plan.schedule, plan.partition, costs, r.optimizer_slots);
  check_device_memory(plan, r.mem_cap_bytes);

  // Simulate again with each stage's costs (recomputed forward before its backward) and the
  // transfer of each boundary activation.
  sched::SimConfig sim;
  const int S = static_cast<int>(plan.partition.stages.size());
  for (int k = 0; k < S; ++k) {
    const StagePlan& st = plan.partition.stages[static_cast<size_t>(k)];
    sched::StageTimes t;
    t.f = t.i = t.w = 0;
    for (int l = st.first_layer; l < st.last_layer; ++l) {
      t.f += costs[static_cast<size_t>(l)].forward_s;
      t.i += costs[static_cast<size_t>(l)].backward_input_s;
      t.w += costs[static_cast<size_t>(l)].backward_weight_s;
    }
    t.i += recompute_time_s(costs, st.first_layer, st.last_layer, r.recompute, k == S - 1);
    sim.stages.push_back(t);
    sim.transfer.push_back(boundary_transfer_s(
        r, plan.schedule, k,
        static_cast<double>(costs[static_cast<size_t>(st.last_layer - 1)].output_bytes)));
  }
  sim.transfer.pop_back();  // S - 1 boundaries
  plan.simulated = sched::simulate(plan.schedule, sim);
  plan.simulated_with = std::move(sim);
  return plan;
}

PipelinePlan make_plan(const Model& model, const PlanRequest& r, const LayerProfiler& profiler) {
  const std::string name = r.schedule.str();
  sched::Schedule compute = compute_schedule(r);
  if (compute.num_stages > model.num_layers())
    throw UsageError(fmt::format("cannot split {} layers into {} stages{}: use --stages <= {}",
                                 model.num_layers(), compute.num_stages,
                                 compute.num_stages != compute.num_devices
                                     ? fmt::format(" ({} devices x {} chunks)", compute.num_devices,
                                                   compute.chunks_per_device())
                                     : "",
                                 model.num_layers() / compute.chunks_per_device()));
  sched::Schedule lowered = lower_schedule(compute, r.data_parallel, name);

  // Costs of one micro-batch (the largest, when M does not divide B).
  const int64_t mb = (r.batch + r.microbatches - 1) / r.microbatches;
  std::vector<LayerProfile> costs;
  std::string described;
  switch (r.costs.kind) {
    case CostSource::Kind::profile:
      if (!profiler.measure) throw UsageError("--costs profile needs a device to profile on");
      costs = profiler.measure(mb);
      described = fmt::format("profiled on {}", profiler.where);
      break;
    case CostSource::Kind::estimate:
      costs = estimate_costs(model, mb);
      described = "estimated from FLOPs and bytes";
      break;
  }
  return plan_with_costs(std::move(lowered), costs, r, name, described);
}

std::string PipelinePlan::report() const {
  std::string out = fmt::format("partition ({}, costs {}):\n{}", partition.method.str(), costs,
                                partition.table());
  const sched::Schedule& s = schedule;
  size_t actions = 0;
  for (const auto& list : s.actions) actions += list.size();
  out += fmt::format("schedule {}: {} devices x {} chunk{}, {} micro-batches, {} actions\n",
                     schedule_name, s.num_devices, s.chunks_per_device(),
                     s.chunks_per_device() == 1 ? "" : "s", s.microbatches, actions);
  out +=
      fmt::format("predicted step time {:.2f} ms; bubble per device:", simulated.step_time * 1e3);
  for (double b : simulated.bubble_fraction) out += fmt::format(" {:.1f}%", 100 * b);
  out += "\npeak in-flight micro-batches per stage:";
  for (int p : simulated.peak_inflight) out += fmt::format(" {}", p);
  if (s.chunks_per_device() > 1) {  // a device holds several stages: what it holds at once
    out += "; per device:";
    for (int p : simulated.peak_inflight_device) out += fmt::format(" {}", p);
  }
  out += "\npredicted peak memory per device:";
  for (int64_t b : device_peak_memory_bytes)
    out += fmt::format(" {:.2f} MiB", static_cast<double>(b) / (1 << 20));
  out += "\n";
  return out;
}

}  // namespace pt
