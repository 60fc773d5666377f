#pragma once
// bench/tensor_parallel's communication volume: two counted T = 2 runs against the formula
// (tensor_parallel_bytes.cpp's header says every term).
#include "bench/tensor_parallel_common.h"

namespace pt::bench {

// Prints the counted run's JSON lines (one per kind of call, then the totals) and returns its
// first loss, which must equal `timed_first_loss` (the timed twin's) bit for bit.
double report_bytes(const Flags& f, const Batch& batch, bool sequence_parallel,
                    double timed_first_loss);

}  // namespace pt::bench
