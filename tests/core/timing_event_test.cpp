// Backend::record_timing_event's default (the CPU backend's): the host clock once the queued
// work is done. The trace's per-action times come from these events (Executor::run).
#include <doctest/doctest.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "engine/core/backend.h"
#include "kernels/cpu/cpu_backend.h"

using namespace pt;

namespace {

class OtherEvent final : public TimingEvent {
 public:
  double seconds_since(TimingEvent&) override { return 0; }
};

}  // namespace

TEST_CASE("timing events measure the time between them, and refuse another backend's event") {
  auto cpu = make_cpu_backend(0, 1);
  const auto a = cpu->record_timing_event();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto b = cpu->record_timing_event();
  const double s = b->seconds_since(*a);
  CHECK(s >= 0.020);  // a sleep lasts at least as long as asked (no upper bound: a busy machine)
  CHECK(a->seconds_since(*b) == doctest::Approx(-s));
  CHECK(b->seconds_since(*b) == 0.0);
  OtherEvent other;
  CHECK_THROWS_AS(b->seconds_since(other), std::logic_error);
}
