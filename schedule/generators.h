#pragma once
// Schedule generators: pure functions (D devices, M micro-batches[, V chunks]) -> compute-only
// Schedule (F/B, or F/I/W). Communication, gradient reduction and optimizer steps are added by
// the lowering passes (schedule/lowering.h); the validator checks the result.
//
// One rule binds every generator: each stage runs its weight-gradient work (B, or W) in ascending
// micro-batch order m = 0..M-1, because single-device training accumulates dW in that order and
// the parity tests compare gradients bit for bit.
//
// Without interleaving, stage s is on device s (S = D). With V chunks per device, stage
// k = c * D + d is chunk c of device d (S = D * V). The V-shaped schedules place their two chunks
// differently (see zbv below): Schedule::stage_device says where each stage is.
#include <string>
#include <string_view>
#include <vector>

#include "schedule/schedule.h"

namespace pt::sched {

// Fill-drain (GPipe): every F, then every B. Holds all M micro-batches' activations.
Schedule gpipe(int D, int M);

// One-forward-one-backward with flush (PipeDream-flush, Megatron's default): at most D - d
// micro-batches in flight on device d. Any M >= 1, including M < D.
Schedule one_f_one_b(int D, int M);

// PipeDream-2BW (Narayanan et al. 2021): 1F1B over K steps of M micro-batches each without a flush
// between them (micro-batch k*M + j is micro-batch j of step k), and UPDATE(s, k) right after
// stage s's last backward of step k. Needs M >= D - 1, so that UPDATE(s, k) precedes stage s's
// first forward of step k + 2 and at most two weight versions are live per stage.
Schedule one_f_one_b_async(int D, int M, int K);

// Megatron's interleaved 1F1B: V model chunks per device, bubble shrunk by V. Any M >= 1: the
// micro-batches go in groups of D per chunk, a remainder spread over the groups (see
// interleaved.cpp); V == 1 is one_f_one_b.
Schedule interleaved(int D, int M, int V);

// Zero-bubble ZB-H1 (Qi et al. 2023): backward split into I (input gradient, on the critical path)
// and W (weight gradient, deferred into the bubbles); peak in-flight micro-batches as in 1F1B.
Schedule zb_h1(int D, int M);

// Zero-bubble ZB-H2 (Qi et al. 2023): as ZB-H1, but up to min(2S - 1, M) micro-batches in flight,
// so device 0's warm-up runs 2S - 1 forwards and the W's fill the drain: with F = I = W and
// M >= 2S - 1 every device is busy from its first action to its last (see zb_h2.cpp). Any M >= 1.
Schedule zb_h2(int D, int M);
// V-shaped schedules (schedule/v_shape.cpp): 2 chunks per device, stage k on device k for k < D
// and on device 2D - 1 - k for k >= D (S = 2D), F/I/W split, built by a greedy list scheduler
// under a per-device activation limit. zbv: zero bubble (beyond the fill) for M >= 2D at 1F1B's
// activation memory (ZB-V, Qi et al. 2023). v-half, v-min: about 1/2 and 1/3 of 1F1B's
// activation memory for a larger bubble (Qi et al. 2024, "Pipeline Parallelism with Controllable
// Memory"). Any D, M >= 1; the layer count must be at least 2D (checked by the plan).
Schedule zbv(int D, int M);
Schedule v_half(int D, int M);
Schedule v_min(int D, int M);
// DualPipeV (DeepSeek's DualPipe cut in half): S = 2D stages in a V, stage k on device k for
// k < D and on device 2D - 1 - k for k >= D; the original's phases, its overlapped F&B pairs as two
// consecutive actions, W's deferred where it defers them. Needs M >= 2D (see dualpipev.cpp).
Schedule dualpipev(int D, int M);

// Evaluation: forward only (no backward, no gradients) over stages placed by `stage_device`
// (stage k on device stage_device[k], as in the training schedule whose layout it mirrors), M
// micro-batches, every device in (micro-batch, stage) order. Validate it with forward_only set.
Schedule forward_only(const std::vector<int>& stage_device, int D, int M);

// By name: "gpipe", "1f1b", "interleaved:V", "zb-h1", "zb-h2", "zbv", "v-half", "v-min",
// "dualpipev", or "file:PATH" (a compute-only schedule in the text format, which must match D
// and M and validate). Throws std::invalid_argument naming the valid names for an unknown one,
// and for D < 1 or M < 1.
Schedule generate(std::string_view name, int D, int M);

// The names generate() accepts, for help texts: {"gpipe", "1f1b", "interleaved:V", ...}.
std::vector<std::string> schedule_names();

}  // namespace pt::sched
