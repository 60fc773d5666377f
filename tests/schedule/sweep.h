#pragma once
// The shapes every schedule test sweeps: each generator for D = 1..5, M = 1..9 (the validator's
// own sweep goes to D = 6, M = 16), interleaved with V = 2, 3, and dualpipev where M >= 2D.
// kVShapes are the V-placed ones built by the list scheduler (dualpipev has its own tests).
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "schedule/generators.h"

namespace pt::sched::test {

struct Generated {
  std::string name;  // generate() name
  int D = 1, M = 1;
  Schedule schedule;
  std::string label() const { return name + " D=" + std::to_string(D) + " M=" + std::to_string(M); }
};

inline const std::vector<std::string> kVShapes{"zbv", "v-half", "v-min"};

inline bool is_v_shape(const std::string& name) {
  return std::find(kVShapes.begin(), kVShapes.end(), name) != kVShapes.end();
}

inline std::vector<Generated> sweep_schedules(int max_d = 5, int max_m = 9) {
  std::vector<Generated> out;
  for (int D = 1; D <= max_d; ++D)
    for (int M = 1; M <= max_m; ++M) {
      for (const char* name : {"gpipe", "1f1b", "zb-h1", "zb-h2"})
        out.push_back({name, D, M, generate(name, D, M)});
      for (const std::string& name : kVShapes) out.push_back({name, D, M, generate(name, D, M)});
      for (int V : {2, 3}) {
        const std::string name = "interleaved:" + std::to_string(V);
        out.push_back({name, D, M, generate(name, D, M)});
      }
      if (M >= 2 * D) out.push_back({"dualpipev", D, M, generate("dualpipev", D, M)});
    }
  return out;
}

}  // namespace pt::sched::test
