#pragma once
// One line naming every device of a run, for its start-up line and its checkpoint's manifest
// (layout.devices): "cpu:0, cpu:1 (each 1 thread, oneDNN 2.6.3)". A run over several devices
// used to name only the first, so a 2-stage run read as a one-device run.
#include <string>
#include <vector>

#include "engine/core/backend.h"

namespace pt {

// Each backend's describe() is "NAME (DETAILS)". When every device has the same details they
// are said once: "cpu:0, cpu:1 (each DETAILS)"; otherwise each device is described in full,
// joined by ", ". One device: its describe() unchanged. Empty: "".
std::string join_device_descriptions(const std::vector<std::string>& descriptions);
std::string describe_devices(const std::vector<Backend*>& devices);

}  // namespace pt
