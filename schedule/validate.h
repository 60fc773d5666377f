#pragma once
// The validator: everything that must hold before a schedule runs, checked without running it.
//
// Structure: D, S, M >= 1; one list per device; stage_device has S entries, all in [0, D); every
//   action names a stage in [0, S) and a micro-batch in [0, M) (none for REDUCE_GRAD), sits
//   on its stage's device, and appears once.
// Compute: every (stage s, micro-batch m) has one F and either one B, or one I and one W (so every
//   stage has M of each); F before B/I, I before W (all of a stage is on one device, so "before"
//   is list order). A forward-only schedule (evaluation) has the F and nothing of the backward.
// Communication: a compute-only schedule has no SEND/RECV. A lowered one has, for every pair of
//   adjacent stages on different devices and every m, SEND_F(s,m) after F(s,m) matched by
//   RECV_F(s+1,m) before F(s+1,m), and SEND_B(s+1,m) after bwd(s+1,m) matched by RECV_B(s,m)
//   before bwd(s,m); and no SEND/RECV between stages on one device (a local hand-off).
// Gradients: REDUCE_GRAD(s) at most once, after every weight-gradient action of s.
// Deadlock: when all of the above holds, a dry run (schedule/dry_run.h) must finish every list.
//
// Every error is one line with the numbers; the report adds the device × step grid with
// "<-- ERROR HERE" at each failing action (or, for a deadlock, where each device is stuck and what
// it waits for).
#include <optional>
#include <string>
#include <vector>

#include "schedule/dependencies.h"

namespace pt::sched {

struct ValidateOptions {
  std::optional<Form> form;   // what the schedule is supposed to be; nullopt: infer_form()
  bool dry_run = true;        // also look for deadlocks (only when the rest is valid)
  bool forward_only = false;  // evaluation: F (and its SEND_F/RECV_F) only, no backward
};

struct Validation {
  std::vector<std::string> errors;  // one line each; empty when valid
  std::string report;               // the errors and the marked grid; empty when valid
  bool ok() const { return errors.empty(); }
};

Validation validate(const Schedule& schedule, const ValidateOptions& options = {});

// Throws std::invalid_argument carrying the report when `schedule` is not valid.
void require_valid(const Schedule& schedule, const ValidateOptions& options = {});

}  // namespace pt::sched
