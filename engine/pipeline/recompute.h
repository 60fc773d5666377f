#pragma once
// Activation recomputation. A stage's layers are cut into segments; a recomputed segment keeps
// only its input after forward (every layer's saved tensors are dropped) and runs its forward
// again just before its backward. Forward is deterministic (dropout masks are counter-based),
// so recomputation changes memory and time, never the numbers.
//   never        no segment is recomputed
//   always       each stage is one recomputed segment (keeps only the stage input)
//   except_last  like always, except the last stage (whose backward follows its forward at once)
//   every:K      each stage is cut into segments of K layers, all recomputed
#include <string>
#include <vector>

namespace pt {

struct RecomputePolicy {
  enum class Kind { never, always, except_last, every };
  Kind kind = Kind::never;
  int every = 0;  // K for Kind::every

  // Parses the --recompute text; throws UsageError naming the valid forms.
  static RecomputePolicy parse(const std::string& text);
  std::string str() const;
};

struct Segment {
  int first_layer, last_layer;  // global layer indices, [first, last)
  bool recompute;
};

// The segments of a stage covering layers [first, last); `last_stage` tells except_last apart.
std::vector<Segment> stage_segments(const RecomputePolicy& policy, int first, int last,
                                    bool last_stage);

}  // namespace pt
