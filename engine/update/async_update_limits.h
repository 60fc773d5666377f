#pragma once
// What --update async (PipeDream-2BW) cannot be combined with for any schedule, in one place: the
// runtime refuses it (PipelineTrainer), and the composition root and the examples refuse it
// earlier, while the flags are parsed, with the same words.
namespace pt {

// Throws UsageError when `clip_norm` > 0 (clipping needs the global gradient norm, but each stage
// updates on its own) or `parity_check` (the reference is synchronous training).
void refuse_unsupported_with_async(float clip_norm, bool parity_check);

}  // namespace pt
