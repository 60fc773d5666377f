#pragma once
// Lowering passes: pure Schedule -> Schedule functions that turn a generator's compute-only lists
// into what the runtime executes. Each adds one kind of action and leaves the rest in order.
#include "schedule/schedule.h"

namespace pt::sched {

// Adds the point-to-point communication between adjacent stages on different devices:
//   RECV_F(s,m) right before F(s,m)    when s-1 is on another device,
//   SEND_F(s,m) right after F(s,m)     when s+1 is on another device,
//   RECV_B(s,m) right before bwd(s,m)  when s+1 is on another device,
//   SEND_B(s,m) right after bwd(s,m)   when s-1 is on another device,
// where bwd is B, or I when the backward is split (I produces the input gradient; W sends
// nothing). Adjacent stages on one device hand off locally: no action. A receive sits as late as
// possible and a send as early as possible, so a device never waits for data earlier than the
// compute that needs it. Throws std::invalid_argument when `schedule` already has communication.
Schedule add_communication(const Schedule& schedule);

// Inserts REDUCE_GRAD(s) right after the last weight-gradient action (B or W) of stage s: from
// there on the stage's gradients are final and their data-parallel all-reduce may run while the
// device goes on with other stages' work. Throws when the schedule already has a REDUCE_GRAD.
Schedule add_grad_reduction(const Schedule& schedule);

}  // namespace pt::sched
