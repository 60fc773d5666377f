#pragma once
// Chrome / Perfetto trace files (the "Trace Event Format" JSON read by ui.perfetto.dev and
// chrome://tracing). Each device is one track (a thread of one process "pipetrain"), named by its
// device name and kept in device order. Each action is one complete event ("ph":"X") named by its
// text form ("1F3"), category "compute" (F, B, I, W) or "communication" (SEND_*, RECV_*,
// REDUCE_GRAD), with args {stage, microbatch (-1: none), step}. A flow arrow ("ph":"s" -> "ph":"f")
// joins each SEND_F(s, m) to the RECV_F(s + 1, m) of the same step and each SEND_B(s, m) to the
// RECV_B(s - 1, m), so the viewer shows which transfer fed which receive.
#include <filesystem>
#include <string>

#include "engine/trace/trace.h"

namespace pt {

// The whole file as text: {"traceEvents":[ one event per line ], "displayTimeUnit":"ms"}.
std::string chrome_trace_json(const Trace& trace);

// Writes chrome_trace_json atomically (temporary file + rename, engine/io/atomic_file.h): a
// viewer polling the file never reads half a trace. Throws UsageError / FileError.
void write_chrome_trace(const std::filesystem::path& path, const Trace& trace);

}  // namespace pt
