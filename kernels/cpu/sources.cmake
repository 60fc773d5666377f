# Included by pipetrain_library() for kernels/cpu (see CMake/PipetrainHelpers.cmake).
# Value-preserving flags that let GCC vectorise our loops:
# -fno-math-errno: our kernels never read errno; otherwise GCC keeps a scalar call for every
#   sqrt (it might set errno) and cannot vectorise loops such as the AdamW update.
# -fno-trapping-math: we never trap on FP exceptions; otherwise GCC will not compute both sides
#   of a select (e.g. exp's overflow clamp) and leaves such loops scalar without AVX-512 masks.
# -ffp-contract=off: no silent a*b+c -> fma fusion, so the AVX-512, AVX2 and baseline versions of
#   a loop (PT_CPU_SIMD_CLONES) round identically and our loops give the same bits on any x86-64.
set_source_files_properties(${sources} PROPERTIES
  COMPILE_OPTIONS "-fno-math-errno;-fno-trapping-math;-ffp-contract=off")
