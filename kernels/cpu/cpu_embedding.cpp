// Embedding lookup and its weight gradient, on the whole table or on one tensor-parallel rank's
// slice of its rows.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_loops.h"

namespace pt {

// y(n, dim) = table(vocab, dim)[ids[i]].
void CpuBackend::embedding_forward(const int32_t* ids, const float* table, float* y, int64_t n,
                                   int64_t dim, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw UsageError(
          fmt::format("embedding_forward: id {} at position {} is outside the vocabulary [0, {})",
                      ids[i], i, vocab));
  cpu::parallel_rows(threads_, n, dim, [=](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      std::memcpy(y + i * dim, table + static_cast<int64_t>(ids[i]) * dim,
                  static_cast<size_t>(dim) * sizeof(float));
  });
}

// dtable[ids[i]] += dy(i). Repeated ids add in position order: threads split the columns, not
// the positions, so the sums do not depend on the thread count.
void CpuBackend::embedding_backward_weight(const int32_t* ids, const float* dy, float* dtable,
                                           int64_t n, int64_t dim) {
  cpu::parallel_column_blocks(threads_, n, dim, [=](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < n; ++i) {
      const float* __restrict src = dy + i * dim;
      float* __restrict dst = dtable + static_cast<int64_t>(ids[i]) * dim;
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  });
}

// The vocab-parallel forms (layers/embedding.h, built with T ranks): this rank's rows
// [first, first + count) of the table; ids elsewhere give zero rows and add no gradient.

void CpuBackend::embedding_forward_slice(const int32_t* ids, const float* table, float* y,
                                         int64_t n, int64_t dim, const VocabRange& range) {
  // Every rank checks the same ids against the whole vocabulary, so all refuse a bad batch
  // before the all-reduce that follows, and none waits for the others in vain.
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= range.total)
      throw UsageError(fmt::format(
          "embedding_forward_slice: id {} at position {} is outside the vocabulary [0, {})", ids[i],
          i, range.total));
  cpu::parallel_rows(threads_, n, dim, [=](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t local = static_cast<int64_t>(ids[i]) - range.first;
      if (local >= 0 && local < range.count)
        std::memcpy(y + i * dim, table + local * dim, static_cast<size_t>(dim) * sizeof(float));
      else
        std::fill_n(y + i * dim, dim, 0.f);
    }
  });
}

// dtable[ids[i] - first] += dy(i) for ids in the slice, in position order as above.
void CpuBackend::embedding_backward_weight_slice(const int32_t* ids, const float* dy, float* dtable,
                                                 int64_t n, int64_t dim, const VocabRange& range) {
  cpu::parallel_column_blocks(threads_, n, dim, [=](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t local = static_cast<int64_t>(ids[i]) - range.first;
      if (local < 0 || local >= range.count) continue;
      const float* __restrict src = dy + i * dim;
      float* __restrict dst = dtable + local * dim;
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  });
}

}  // namespace pt
