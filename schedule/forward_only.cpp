#include <stdexcept>
#include <string>

#include "schedule/generators.h"

namespace pt::sched {

// Device d runs, for m = 0..M-1, the F of each stage it holds in ascending stage order:
//
//   D = 2, M = 3, stages 0..1:   device 0:  0F0 0F1 0F2
//                                device 1:      1F0 1F1 1F2
//
// Every list follows one order, (micro-batch, stage), and each F waits only for the F before it in
// that order, so no device ever waits for one that waits for it. Nothing waits for a backward:
// a stage forgets a micro-batch as soon as its output has left.
Schedule forward_only(const std::vector<int>& stage_device, int D, int M) {
  if (D < 1 || M < 1 || stage_device.empty())
    throw std::invalid_argument(
        "forward_only: needs devices >= 1, micro-batches >= 1 and at least one "
        "stage (got devices=" +
        std::to_string(D) + " microbatches=" + std::to_string(M) +
        " stages=" + std::to_string(stage_device.size()) + ")");
  Schedule s = empty_schedule(D, static_cast<int>(stage_device.size()), M);
  s.stage_device = stage_device;
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < s.num_stages; ++k) {
      const int d = stage_device[static_cast<size_t>(k)];
      if (d < 0 || d >= D)
        throw std::invalid_argument("forward_only: stage " + std::to_string(k) +
                                    " is placed on device " + std::to_string(d) + ", outside 0.." +
                                    std::to_string(D - 1));
      s.actions[static_cast<size_t>(d)].push_back({k, ActionType::F, m});
    }
  return s;
}

}  // namespace pt::sched
