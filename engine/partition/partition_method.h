#pragma once
// How the partitioner chooses the layers of each stage, parsed once from its text form:
//   uniform | params | time | memory | layout:a,b,...
// (see partitioner.h for what each one optimises). A layout's counts are checked against the
// model and the stage count by the partitioner, which knows them.
#include <string>
#include <string_view>
#include <vector>

namespace pt {

struct PartitionMethod {
  enum class Kind { uniform, params, time, memory, layout };
  Kind kind = Kind::uniform;
  std::vector<int> layout;  // layers per stage, for Kind::layout

  // Throws UsageError naming the valid forms.
  static PartitionMethod parse(std::string_view text);
  std::string str() const;  // the text parse() reads back: "time", "layout:3,3,2"
  bool operator==(const PartitionMethod&) const = default;
};

// "3,3,2" -> {3, 3, 2}; throws UsageError for anything that is not a list of integers.
std::vector<int> parse_layout(std::string_view text);

}  // namespace pt
