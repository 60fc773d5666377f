#include "engine/pipeline/recompute.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

RecomputePolicy RecomputePolicy::parse(const std::string& text) {
  RecomputePolicy p;
  if (text == "never") return p;
  if (text == "always") return {Kind::always, 0};
  if (text == "except_last") return {Kind::except_last, 0};
  if (text.starts_with("every:")) {
    int k = 0;
    const char* first = text.data() + 6;
    const char* last = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(first, last, k);
    if (ec == std::errc() && ptr == last && k >= 1) return {Kind::every, k};
  }
  throw UsageError(
      fmt::format("unknown --recompute '{}': use never, always, except_last or every:K "
                  "(K >= 1 layers per recomputed segment)",
                  text));
}

std::string RecomputePolicy::str() const {
  switch (kind) {
    case Kind::never: return "never";
    case Kind::always: return "always";
    case Kind::except_last: return "except_last";
    case Kind::every: return fmt::format("every:{}", every);
  }
  return "?";
}

std::vector<Segment> stage_segments(const RecomputePolicy& policy, int first, int last,
                                    bool last_stage) {
  switch (policy.kind) {
    case RecomputePolicy::Kind::never: return {{first, last, false}};
    case RecomputePolicy::Kind::always: return {{first, last, true}};
    case RecomputePolicy::Kind::except_last: return {{first, last, !last_stage}};
    case RecomputePolicy::Kind::every: {
      std::vector<Segment> out;
      for (int a = first; a < last; a += policy.every)
        out.push_back({a, std::min(last, a + policy.every), true});
      return out;
    }
  }
  return {{first, last, false}};
}

}  // namespace pt
