// Where a PipelineTrainer's devices stand, for people: the grid of every device's action list
// with its position (in the error of a wait that timed out) and the flight recorder's copy of
// the lists (for pipetrain-hang).
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/pipeline/pipeline_trainer.h"
#include "engine/pipeline/progress_grid.h"
#include "engine/trace/flight_recorder.h"

namespace pt {

namespace {

size_t at(int i) { return static_cast<size_t>(i); }

std::vector<std::string> action_texts(const std::vector<sched::Action>& actions) {
  std::vector<std::string> out;
  out.reserve(actions.size());
  for (const sched::Action& a : actions) out.push_back(a.str());
  return out;
}

}  // namespace

std::string PipelineTrainer::progress(const sched::Schedule& schedule,
                                      const ScheduleRun& run) const {
  std::vector<DeviceProgress> grid;
  for (int d = 0; d < schedule.num_devices; ++d) {
    DeviceProgress p;
    if (!local(d)) {
      p.label = fmt::format("device {}", d);
      p.note = fmt::format("in another process (world rank {})",
                           config_.parallel.pipeline_group->world_rank(d));
    } else {
      p.label = fmt::format("device {} ({})", d, devices_[at(d)]->device().str());
      p.actions = action_texts(schedule.actions[at(d)]);
      p.position = run.position[at(d)].load();
    }
    grid.push_back(std::move(p));
  }
  return render_progress(grid);
}

// The flight recorder's copy of the lists this process's devices run (for pipetrain-hang).
void PipelineTrainer::record_action_lists(const sched::Schedule& schedule, FlightList list) const {
  for (int d : local_devices_)
    flight_recorder().set_action_list(
        {list, flight_device(d),
         fmt::format("replica {} device {} ({})", config_.parallel.replica, d,
                     devices_[at(d)]->device().str()),
         action_texts(schedule.actions[at(d)])});
}

int PipelineTrainer::flight_device(int d) const {
  return config_.parallel.replica * config_.schedule.num_devices + d;
}

}  // namespace pt
