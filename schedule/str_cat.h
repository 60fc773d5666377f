#pragma once
// cat("a", s, 'c', view): one string from pieces, appended in order (internal to schedule/).
// Preferred over `"literal" + std::string(...)` chains, which at -O3 trip GCC 12's false
// -Wrestrict warning (GCC bug 105329) and cost a temporary per `+`.
#include <string>

namespace pt::sched::detail {

template <typename... Pieces>
std::string cat(const Pieces&... pieces) {
  std::string out;
  (out += ... += pieces);
  return out;
}

}  // namespace pt::sched::detail
