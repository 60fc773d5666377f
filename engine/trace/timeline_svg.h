#pragma once
// A picture of one step to look at: an SVG 1.1 timeline (plain text, no scripts, opens in any
// browser). One horizontal lane per device, labelled with its name; one box per action placed by
// time and coloured by type (F blue, B and I greens, W teal); SEND/RECV and
// REDUCE_GRAD as thin grey bars under the compute boxes, so they stay visible even when they
// overlap compute. A box wide enough shows its micro-batch number; every box has a tooltip with its
// full text and times. A time axis with ticks in ms runs under the lanes, and the title line gives
// the step span and each device's bubble (bubble.h).
//
// Works the same for a measured trace and a simulated one (trace_from_simulation in
// from_simulation.h, or make_trace in trace.h for any other timeline).
#include <filesystem>
#include <string>

#include "engine/trace/trace.h"

namespace pt {

// Throws UsageError when the trace has no event of `step`.
std::string render_timeline_svg(const Trace& trace, int step);

// Writes render_timeline_svg atomically (temporary file + rename).
void write_timeline_svg(const std::filesystem::path& path, const Trace& trace, int step);

}  // namespace pt
