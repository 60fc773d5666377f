#pragma once
// What an action waits for. This file is the one definition of readiness: the dry run (deadlock
// check), the validator and the timed simulator all ask it, none keeps its own copy.
//
// Besides the actions before it in its own device's list, an action at stage s, micro-batch m
// waits for:
//
//   action          compute-only schedule           lowered schedule
//   --------------  ------------------------------  ------------------------------------------
//   F(s,m)          F(s-1,m)                        RECV_F(s,m) if s-1 is on another device,
//                                                   else F(s-1,m) (a local hand-off)
//   B(s,m), I(s,m)  F(s,m) and bwd(s+1,m)           F(s,m) and RECV_B(s,m) if s+1 is on another
//                                                   device, else bwd(s+1,m)
//   W(s,m)          I(s,m)                          I(s,m)
//   SEND_F(s,m)     -                               F(s,m)
//   RECV_F(s,m)     -                               SEND_F(s-1,m)
//   SEND_B(s,m)     -                               bwd(s,m)
//   RECV_B(s,m)     -                               SEND_B(s+1,m)
//   REDUCE_GRAD(s)  wgrad(s,m) for every m          (same)
//
// where bwd(s,m) is the input-gradient producer of (s,m): I(s,m) when the schedule splits the
// backward, else B(s,m); and wgrad(s,m) is the weight-gradient action: W(s,m), else B(s,m).
// Stage 0 has no F(s-1) and the last stage no bwd(s+1). A SEND never waits for its RECV: sends
// are non-blocking (the transport buffers), which the runtime's transports must honour.
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "schedule/schedule.h"

namespace pt::sched {

// Whether a schedule carries its communication. Generators emit compute-only lists, in which a
// cross-device hand-off is the direct dependency F(s-1,m) -> F(s,m); lowering adds SEND/RECV.
enum class Form { ComputeOnly, Lowered };

// Lowered when any list holds a SEND or RECV. (A one-device schedule needs none either way.)
Form infer_form(const Schedule& schedule);

// Where an action sits: device and position in that device's list.
struct Slot {
  int device = -1;
  int index = -1;
  bool operator==(const Slot&) const = default;
};

// Finds actions by value. When an action appears more than once (an invalid schedule) the first
// occurrence wins; the validator reports the duplicate.
// Every lookup of the dry run, validator and simulator goes through here, so keys inside the
// schedule's range (stage < S, micro-batch <= M, the UPDATE step < M) sit in a dense table (a
// map made simulating S = 64, M = 1024, about 1M actions, take seconds); keys outside it (only
// invalid schedules have them) go to a map.
class ActionIndex {
 public:
  explicit ActionIndex(const Schedule& schedule);
  std::optional<Slot> find(const Action& action) const;

 private:
  // The dense position of (stage, type, micro-batch + 1), or -1 when out of range.
  int64_t dense_key(const Action& action) const;
  int stages_ = 0, microbatches_ = 0;
  std::vector<Slot> dense_;                                 // Slot{-1, -1}: none
  std::map<std::tuple<int, int, int>, Slot> out_of_range_;  // (stage, type, micro-batch) -> slot
};

// bwd(s,m) and wgrad(s,m) of the table above, chosen by what the schedule holds.
Action backward_of(int stage, int microbatch, const ActionIndex& index);
Action weight_grad_of(int stage, int microbatch, const ActionIndex& index);

// The actions `action` waits for, per the table above. Some may be in no list (an invalid
// schedule): callers report them as missing.
std::vector<Action> dependencies(const Action& action, const Schedule& schedule, Form form,
                                 const ActionIndex& index);

}  // namespace pt::sched
