// describe_devices: every device of a run is named, shared details said once.
#include "engine/devices/describe_devices.h"

#include <doctest/doctest.h>

#include "engine/devices/devices.h"

using namespace pt;

TEST_CASE("describe_devices: every device named, the details they share said once") {
  CHECK(join_device_descriptions({}) == "");
  CHECK(join_device_descriptions({"cpu:0 (1 thread, oneDNN 2.6.3)"}) ==
        "cpu:0 (1 thread, oneDNN 2.6.3)");
  CHECK(join_device_descriptions(
            {"cpu:0 (1 thread, oneDNN 2.6.3)", "cpu:1 (1 thread, oneDNN 2.6.3)"}) ==
        "cpu:0, cpu:1 (each 1 thread, oneDNN 2.6.3)");
  // Different details: each device in full.
  CHECK(join_device_descriptions(
            {"cpu:0 (2 threads, oneDNN 2.6.3)", "cpu:1 (1 thread, oneDNN 2.6.3)"}) ==
        "cpu:0 (2 threads, oneDNN 2.6.3), cpu:1 (1 thread, oneDNN 2.6.3)");
  CHECK(join_device_descriptions({"cpu:0", "cpu:1 (1 thread)"}) == "cpu:0, cpu:1 (1 thread)");
}

TEST_CASE("describe_devices: the opened devices of a 3-device run, each by its name") {
  DeviceSet set = open_devices("cpu:0..2", 0, 1);
  std::vector<Backend*> devices;
  for (auto& b : set.backends) devices.push_back(b.get());
  const std::string line = describe_devices(devices);
  CHECK(line.rfind("cpu:0, cpu:1, cpu:2 (each 1 thread", 0) == 0);
}
