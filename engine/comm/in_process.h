#pragma once
// In-process communicators: a group of ranks that are threads of one process (rank r is used by
// one thread at a time). Used by the tests, by single-process data parallelism and as the
// reference the MPI implementation is compared with.
//
// Collectives meet at a rendezvous: every rank deposits its pointers, the reduction is computed
// once, in rank order ((x0 + x1) + x2) + ..., and every rank copies the same result, so results
// are the same bits on every rank and equal to a plain sequential sum. Sends are buffered (the
// data is copied into a per-(source, destination, tag) queue and the send completes at once).
// After a collective timed out the group is unusable: every later collective on it throws.
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"

namespace pt {

// One communicator per rank (element r is rank r of the world); throws UsageError when size < 1
// or timeout_s <= 0. `name` appears in describe() and in error messages.
std::vector<std::unique_ptr<Communicator>> make_in_process_group(int size, double timeout_s,
                                                                 std::string name);

}  // namespace pt
