#include "engine/plan/full_shard.h"

#include <algorithm>

#include "engine/partition/byte_count.h"
#include "engine/partition/stage_cost.h"
#include "engine/plan/recompute_cost.h"

namespace pt {

const char* shard_name(ShardChoice s) { return s == ShardChoice::full ? "full" : "none"; }

double ring_allgather_s(double bytes, int R, const Link& link) {
  if (R < 2 || bytes <= 0) return 0;
  return (R - 1.0) / R * bytes / link.bytes_per_second + (R - 1.0) * link.latency_s;
}

std::vector<LayerProfile> with_full_shard_gathers(const std::vector<LayerProfile>& layers, int R,
                                                  int M, const Link& link, bool prefetch,
                                                  bool split_backward) {
  std::vector<LayerProfile> out = layers;
  for (LayerProfile& p : out) {
    const double gather = ring_allgather_s(static_cast<double>(p.param_bytes), R, link);
    const double forward = p.forward_s;
    if (!prefetch) {
      p.forward_s += gather;
      p.backward_input_s += gather;
      if (split_backward) p.backward_weight_s += gather;
      p.forward_gather_s = gather;
      continue;
    }
    // Gathered while the layer before computes: only the excess over that compute waits. In the
    // backward the link also carries the reduce-scatter (the same bytes), once per step: 1 / M of
    // it per micro-batch.
    const double backward = gather * (1 + 1.0 / M);
    p.forward_s = std::max(p.forward_s, gather);
    if (split_backward) {
      p.backward_input_s = std::max(p.backward_input_s, gather);
      p.backward_weight_s = std::max(p.backward_weight_s, backward);
    } else {
      p.backward_input_s += std::max(0.0, backward - p.backward_input_s - p.backward_weight_s);
    }
    p.forward_gather_s = p.forward_s - forward;
  }
  return out;
}

int64_t full_shard_stage_bytes(const std::vector<LayerProfile>& layers, int first, int last,
                               int inflight, int optimizer_slots, const RecomputePolicy& policy,
                               bool last_stage, int R, int M) {
  const int64_t params = stage_param_bytes(layers, first, last);
  // This replica's parts of parameters, gradients and optimizer state (saturating: byte_count.h;
  // a saturated count stays over every cap).
  const int64_t whole_state = times_bytes(2 + optimizer_slots, params);
  const int64_t parts = whole_state == kBytesBeyond ? kBytesBeyond : (whole_state + R - 1) / R;
  const int64_t summing = M > 1 ? params : 0;  // every unit's whole gradient, until the reduce
  return add_bytes(add_bytes(parts, summing),
                   stage_activation_peak_bytes(layers, first, last, inflight, policy, last_stage));
}

int64_t full_shard_gather_buffer_bytes(const std::vector<LayerProfile>& layers,
                                       const std::vector<std::pair<int, int>>& held,
                                       const RecomputePolicy& policy, int M, bool prefetch) {
  int64_t segment = 0, unit = 0;
  for (const auto& [first, last] : held) {
    const bool last_stage = static_cast<size_t>(last) == layers.size();
    for (const Segment& seg : stage_segments(policy, first, last, last_stage)) {
      for (int l = seg.first_layer; l < seg.last_layer; ++l)
        unit = std::max(unit, layers[static_cast<size_t>(l)].param_bytes);
      // A recomputed segment gathers each of its units and keeps them for their backward.
      if (seg.recompute)
        segment = std::max(segment, stage_param_bytes(layers, seg.first_layer, seg.last_layer));
    }
  }
  const int64_t ahead = prefetch ? unit : 0;  // the next unit's gather, the last's reduce
  const int64_t params = add_bytes(std::max(segment, unit), ahead);
  return M > 1 ? params : add_bytes(params, add_bytes(unit, ahead));
}

double full_shard_reduce_s(const std::vector<LayerProfile>& layers,
                           const std::vector<std::pair<int, int>>& held, int R, const Link& link,
                           bool prefetch) {
  double t = 0;
  for (const auto& [first, last] : held)
    for (int l = first; l < last; ++l) {
      const double s = ring_allgather_s(
          static_cast<double>(layers[static_cast<size_t>(l)].param_bytes), R, link);
      if (prefetch && s > 0) return s;  // the backward ends here: nothing left to hide it
      t += s;
    }
  return t;
}

std::vector<std::vector<std::pair<int, int>>> held_layers(const sched::Schedule& schedule,
                                                          const Partition& partition) {
  std::vector<std::vector<std::pair<int, int>>> out(static_cast<size_t>(schedule.num_devices));
  for (size_t k = 0; k < partition.stages.size(); ++k)
    out[static_cast<size_t>(schedule.device_of(static_cast<int>(k)))].emplace_back(
        partition.stages[k].first_layer, partition.stages[k].last_layer);
  return out;
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> full_shard_device_memory(
    const sched::Schedule& schedule, const Partition& partition, const std::vector<int>& inflight,
    const std::vector<LayerProfile>& costs, int optimizer_slots, const RecomputePolicy& policy,
    int R, int M, bool prefetch) {
  std::vector<int64_t> peak(static_cast<size_t>(schedule.num_devices), 0), grads(peak);
  const int stages = static_cast<int>(partition.stages.size());
  for (int k = 0; k < stages; ++k) {
    const StagePlan& st = partition.stages[static_cast<size_t>(k)];
    const auto d = static_cast<size_t>(schedule.device_of(k));
    peak[d] =
        add_bytes(peak[d], full_shard_stage_bytes(costs, st.first_layer, st.last_layer,
                                                  inflight[static_cast<size_t>(k)], optimizer_slots,
                                                  policy, k == stages - 1, R, M));
    const int64_t whole = times_bytes(st.params, static_cast<int64_t>(sizeof(float)));
    grads[d] = add_bytes(grads[d], whole == kBytesBeyond ? whole : (whole + R - 1) / R);
  }
  const auto held = held_layers(schedule, partition);
  for (size_t d = 0; d < peak.size(); ++d)
    peak[d] =
        add_bytes(peak[d], full_shard_gather_buffer_bytes(costs, held[d], policy, M, prefetch));
  return {peak, grads};
}

double full_shard_step_reduce_s(const sched::Schedule& schedule, const Partition& partition,
                                const std::vector<LayerProfile>& costs, int R, const Link& link,
                                bool prefetch) {
  double most = 0;
  for (const auto& held : held_layers(schedule, partition))
    most = std::max(most, full_shard_reduce_s(costs, held, R, link, prefetch));
  return most;
}

double full_shard_gather_added_s(const sched::Schedule& schedule, const Partition& partition,
                                 const std::vector<LayerProfile>& plain,
                                 const std::vector<LayerProfile>& gathered, int M) {
  std::vector<double> added(static_cast<size_t>(schedule.num_devices), 0);
  for (size_t k = 0; k < partition.stages.size(); ++k)
    for (int l = partition.stages[k].first_layer; l < partition.stages[k].last_layer; ++l)
      added[static_cast<size_t>(schedule.device_of(static_cast<int>(k)))] +=
          M *
          (gathered[static_cast<size_t>(l)].total_s() - plain[static_cast<size_t>(l)].total_s());
  return *std::max_element(added.begin(), added.end());
}

}  // namespace pt
