#pragma once
// An Action is one step of one device's work in a pipeline schedule: (stage, type, micro-batch).
// Its canonical text form prints and parses: "2F0", "1B3", "0W2", "1SEND_F0", "2RECV_B1",
// "0REDUCE_GRAD" — the stage index, the type, then the micro-batch when it has one.
//
// `stage` is the global (virtual) stage index in [0, S_total): with interleaving each device
// holds V model chunks, and chunk c of device d is stage c * D + d, so S_total = D * V. Layers are
// split into S_total contiguous ranges, stage k feeding stage k + 1.
//
// Meaning of each type at stage s, micro-batch m:
//   F       forward of s's layers on m (stage 0 reads the input; the last stage adds the loss)
//   B       full backward of s on m: I then W
//   I       input gradient only (backward_input through s's layers)
//   W       weight gradient only (backward_weight; dW += ...)
//   SEND_F  send s's output activation of m to stage s + 1
//   RECV_F  receive the input activation of m from stage s - 1
//   SEND_B  send the gradient w.r.t. s's input for m to stage s - 1
//   RECV_B  receive the gradient w.r.t. s's output for m from stage s + 1
//   REDUCE_GRAD  start the data-parallel gradient reduction of s (no micro-batch)
//   UPDATE  asynchronous pipelines only (--update async, one_f_one_b_async): stage s applies the
//           optimizer to its own parameters with the gradient of step k, where k is the number
//           printed after it ("1UPDATE2": stage 1, step 2) and stored in `microbatch`
// In synchronous schedules the optimizer step is not an action: it needs every stage's gradients
// (the global norm for clipping and the inf/NaN check), so the runtime takes it once after all
// lists ran. Asynchronous updates are per stage by design (no global norm), hence UPDATE.
// This header depends on the standard library only (schedule/ is pure code).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pt::sched {

enum class ActionType : uint8_t { F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B, REDUCE_GRAD, UPDATE };

struct Action {
  int stage = 0;
  ActionType type = ActionType::F;
  int microbatch = -1;  // -1 for REDUCE_GRAD; the step for UPDATE

  bool operator==(const Action&) const = default;
  std::string str() const;  // canonical text form
};

std::string_view type_name(ActionType t);  // "F", "SEND_F", ...
bool has_microbatch(ActionType t);         // false for REDUCE_GRAD and UPDATE
bool has_number(ActionType t);             // a number follows the type: all but REDUCE_GRAD
bool is_compute(ActionType t);             // F, B, I, W
bool is_communication(ActionType t);       // SEND_*, RECV_*

// Parses the canonical text form; std::nullopt when `text` is not one.
std::optional<Action> parse_action(std::string_view text);

}  // namespace pt::sched
