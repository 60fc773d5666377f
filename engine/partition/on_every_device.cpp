#include "engine/partition/on_every_device.h"

#include <exception>
#include <mutex>
#include <thread>

#include <fmt/format.h>

namespace pt {

void on_every_device(const std::vector<Backend*>& devices,
                     const std::function<void(size_t, std::barrier<>&)>& body) {
  std::barrier<> together(static_cast<std::ptrdiff_t>(devices.size()));
  std::mutex failed;
  std::exception_ptr error;
  std::vector<std::thread> threads;
  for (size_t d = 0; d < devices.size(); ++d)
    threads.emplace_back([&, d] {
      try {
        devices[d]->bind_current_thread();
        body(d, together);
      } catch (...) {
        const std::lock_guard lock(failed);
        if (!error) error = std::current_exception();
        together.arrive_and_drop();  // the others do not wait for this one's rounds
      }
    });
  for (std::thread& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

std::string every_device_at_once(const std::vector<Backend*>& devices) {
  if (devices.size() == 1) return devices[0]->device().str();
  return fmt::format("{}..{} at once", devices.front()->device().str(),
                     devices.back()->device().str());
}

}  // namespace pt
