#pragma once
// Hand-made traces shared by the trace tests.
#include <vector>

#include "engine/trace/trace.h"

namespace pt::test {

inline sched::Action act(int stage, sched::ActionType type, int m) { return {stage, type, m}; }

// One event, arguments in reading order: on `device`, `action` from `start_us` to `end_us`.
inline TraceEvent event(int device, sched::Action action, double start_us, double end_us,
                        int step = 0) {
  return {{action, start_us, end_us}, device, step};
}

// GPipe on D = 2 devices, M = 2 micro-batches, one stage per device: F = 100 us, B = 200 us,
// every SEND/RECV 10 us, run strictly one action at a time per device. Times shifted by
// `offset_us`, all events tagged `step`.
//
//   us:     0    100 110  210 220  320        520 530        730 740        940
//   cpu:0  [F0  ][S ][F1 ][S ]                    [R ][B0          ][R ][B1          ]
//   cpu:1        [R ][F0 ][R ][F1 ][B0        ][S ][B1         ][S ]
//
// Step span 940 us; busy 600 us on each device; bubble 1 - 600/940 = 17/47 on both.
// Device spans: cpu:0 940 us, cpu:1 640 us (100 .. 740). Four SEND -> RECV pairs.
inline std::vector<TraceEvent> gpipe_2x2(int step = 0, double offset_us = 0) {
  using T = sched::ActionType;
  const std::vector<TraceEvent> rows = {
      event(0, act(0, T::F, 0), 0, 100),        event(0, act(0, T::SEND_F, 0), 100, 110),
      event(0, act(0, T::F, 1), 110, 210),      event(0, act(0, T::SEND_F, 1), 210, 220),
      event(1, act(1, T::RECV_F, 0), 100, 110), event(1, act(1, T::F, 0), 110, 210),
      event(1, act(1, T::RECV_F, 1), 210, 220), event(1, act(1, T::F, 1), 220, 320),
      event(1, act(1, T::B, 0), 320, 520),      event(1, act(1, T::SEND_B, 0), 520, 530),
      event(1, act(1, T::B, 1), 530, 730),      event(1, act(1, T::SEND_B, 1), 730, 740),
      event(0, act(0, T::RECV_B, 0), 520, 530), event(0, act(0, T::B, 0), 530, 730),
      event(0, act(0, T::RECV_B, 1), 730, 740), event(0, act(0, T::B, 1), 740, 940),
  };
  std::vector<TraceEvent> events;
  for (const TraceEvent& r : rows)
    events.push_back(event(r.device, r.action, r.start_us + offset_us, r.end_us + offset_us, step));
  return events;
}

inline Trace gpipe_2x2_trace() { return {{"cpu:0", "cpu:1"}, gpipe_2x2()}; }

}  // namespace pt::test
