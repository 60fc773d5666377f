#pragma once
// Argument checks shared by the generators (internal to schedule/).
#include <stdexcept>
#include <string>
#include <string_view>

namespace pt::sched::detail {

inline void require_shape(std::string_view name, int D, int M) {
  if (D < 1 || M < 1)
    throw std::invalid_argument(std::string(name) + " schedule needs at least 1 device and 1 " +
                                "micro-batch (devices: " + std::to_string(D) +
                                ", micro-batches: " + std::to_string(M) + ")");
}

}  // namespace pt::sched::detail
