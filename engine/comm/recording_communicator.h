#pragma once
// A Communicator that records every call it passes on in the flight recorder
// (engine/trace/flight_recorder.h): point-to-point sends (until their request completed) and
// receives with peer, tag and bytes, collectives with their group, each with its start and end
// time and whether it finished or timed out. Groups split from it are recorded too. Peers are
// world ranks; groups are named as at their split, the same on every member, so the records of
// all ranks can be matched (pipetrain-hang).
#include <memory>

#include "engine/comm/communicator.h"
#include "engine/trace/flight_recorder.h"

namespace pt {

std::unique_ptr<Communicator> record_calls(std::unique_ptr<Communicator> inner, std::string name,
                                           FlightRecorder& recorder);

}  // namespace pt
