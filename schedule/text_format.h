#pragma once
// The schedule text format: what `--schedule file:PATH` reads, what golden tests compare, what a
// person writes by hand to try a new order.
//
//   # 1F1B, 2 devices, 3 micro-batches          <- '#' starts a comment, anywhere on a line
//   pipeline devices=2 stages=2 microbatches=3  <- first: the shape (keys in this order)
//   placement 0 1                               <- optional: device of each stage;
//                                                  default stage k -> device k % devices
//   device 0: 0F0 0F1 0B0 0F2 0B1 0B2           <- one line per device, each device once,
//   device 1: 1F0 1B0 1F1 1B1 1F2 1B2              actions in canonical form (action.h)
//
// Blank lines are ignored. Parsing checks the syntax and the shape only; whether the actions make
// a runnable schedule is the validator's job (schedule/validate.h), which read_schedule_file()
// also runs.
#include <string>
#include <string_view>

#include "schedule/schedule.h"

namespace pt::sched {

// The canonical text: header, placement only when it differs from the default, one line per
// device. parse_schedule_text(to_text(s)) == s.
std::string to_text(const Schedule& schedule);

// Parses the text format. Throws std::invalid_argument "<source>, line N: what is wrong" on any
// syntax error, out-of-range device or placement, or a missing or repeated device line.
Schedule parse_schedule_text(std::string_view text, std::string_view source = "schedule text");

// Reads and parses `path`, then validates the result (either form); throws std::invalid_argument
// with the file name, and for an invalid schedule the validator's report with its grid.
Schedule read_schedule_file(const std::string& path);

}  // namespace pt::sched
