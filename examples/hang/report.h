#pragma once
// What pipetrain-hang says about a folder of flight records (one per rank): each rank's record,
// every device's position in its action list (the grid of the runtime's timeout messages), who
// waits for whom, the first send or receive that has no partner on its peer, and the rank that
// everybody waits for but that waits for nobody.
#include <string>
#include <vector>

#include "engine/trace/flight_record_file.h"

namespace pt::hang {

// `records`: by world rank, any subset of the job's ranks.
std::string report(const std::vector<FlightRecord>& records);

}  // namespace pt::hang
