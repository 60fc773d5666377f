#pragma once
// The grid of action lists with each device's current action marked, as the timeout messages
// print it and pipetrain-hang prints it for every rank of a job:
//
//   where each device was (the action in [brackets] is the one it was executing):
//     device 0 (cpu:0): 0F0 0SEND_F0 [0F1] 0SEND_F1 ...
//     device 1: in another process (world rank 3)
//     device 2 (cpu:1): 1RECV_F0 1F0 ...  (finished)
#include <string>
#include <vector>

namespace pt {

struct DeviceProgress {
  std::string label;                 // "device 0 (cpu:0)"
  std::vector<std::string> actions;  // the list, as text
  int position = -1;                 // the action being executed; >= size: finished; < 0: none
  std::string note;                  // when not empty, printed instead of the list
};

std::string render_progress(const std::vector<DeviceProgress>& devices);

}  // namespace pt
