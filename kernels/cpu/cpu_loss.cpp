// Losses: softmax cross-entropy (whole rows, or one tensor-parallel rank's slice of the classes),
// mean squared error, and the accuracy count.
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_loops.h"
#include "kernels/cpu/cpu_math.h"

namespace pt {

namespace {

void check_labels(const char* op, const int32_t* labels, int64_t rows, int64_t classes) {
  for (int64_t r = 0; r < rows; ++r)
    if (labels[r] < 0 || labels[r] >= classes)
      throw UsageError(fmt::format(
          "{}: row {} has label {}, outside [0, {}); labels must be class indices below the "
          "number of classes",
          op, r, labels[r], classes));
}

// p[0, n) = exp(x - max) / sum; returns log(sum) - (x[label] - max) = -log p[label] in double.
PT_CPU_SIMD_CLONES double softmax_row(const float* __restrict x, float* __restrict p, int64_t n,
                                      int32_t label) {
  float lanes[16];
  for (int j = 0; j < 16; ++j) lanes[j] = x[0];
  int64_t c = 0;
  for (; c + 16 <= n; c += 16)
    for (int j = 0; j < 16; ++j) lanes[j] = x[c + j] > lanes[j] ? x[c + j] : lanes[j];
  float mx = lanes[0];
  for (int j = 1; j < 16; ++j) mx = lanes[j] > mx ? lanes[j] : mx;
  for (; c < n; ++c) mx = x[c] > mx ? x[c] : mx;
  for (c = 0; c < n; ++c) p[c] = cpu::exp_f32(x[c] - mx);
  const float sum = cpu::sum_f32(p, n);
  const float inv = 1.f / sum;
  for (c = 0; c < n; ++c) p[c] *= inv;
  return std::log(static_cast<double>(sum)) - static_cast<double>(x[label] - mx);
}

// The partials of one row's slice x[0, n) whose first class is `first` (op_params.h): the
// first maximum by the same strict scan as count_correct, the sum of exponentials with
// sum_f32's 16 lanes (so a single slice sums as softmax_row does), the label's logit.
PT_CPU_SIMD_CLONES void softmax_partial_row(const float* __restrict x, int64_t n, int64_t first,
                                            int32_t label, float* __restrict out) {
  float mx = -std::numeric_limits<float>::infinity();
  int64_t at = 0;
  for (int64_t c = 0; c < n; ++c)
    if (x[c] > mx) {  // false for NaN: NaNs are ignored here and poison the sum below
      mx = x[c];
      at = c;
    }
  float sum = 0.f;
  if (mx != -std::numeric_limits<float>::infinity()) {  // exp(-inf - -inf) would be NaN
    float acc[16] = {};
    int64_t c = 0;
    for (; c + 16 <= n; c += 16)
      for (int j = 0; j < 16; ++j) acc[j] += cpu::exp_f32(x[c + j] - mx);
    for (int j = 0; j < 16; ++j) sum += acc[j];
    for (; c < n; ++c) sum += cpu::exp_f32(x[c] - mx);
  }
  const int64_t local = static_cast<int64_t>(label) - first;
  out[0] = mx;
  out[1] = sum;
  out[2] = local >= 0 && local < n ? x[local] : 0.f;
  out[3] = static_cast<float>(first + at);
}

}  // namespace

// probs(rows, classes) = softmax(logits); returns sum_r -log probs[r, label_r], computed as
// log(sum_c exp(x_c - max)) - (x_label - max) in double (finite even when probs underflow).
// Per-row losses are added in row order, whatever the thread count.
double CpuBackend::softmax_xent_forward(const float* logits, const int32_t* labels, float* probs,
                                        int64_t rows, int64_t classes) {
  check_labels("softmax_xent_forward", labels, rows, classes);
  std::vector<double> row_loss(static_cast<size_t>(rows));
  double* losses = row_loss.data();
  cpu::parallel_chunks(threads_, rows, rows * classes * 4, 1, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      losses[r] = softmax_row(logits + r * classes, probs + r * classes, classes, labels[r]);
  });
  double total = 0.0;
  for (double l : row_loss) total += l;
  return total;
}

// dlogits(rows, classes) = scale * (probs - onehot(labels)).
void CpuBackend::softmax_xent_backward(const float* probs, const int32_t* labels, float* dlogits,
                                       int64_t rows, int64_t classes, float scale) {
  check_labels("softmax_xent_backward", labels, rows, classes);
  cpu::parallel_rows(threads_, rows, classes, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      // dlogits may be probs (in place): the label's probability is read before the row is
      // written, and every other element is read just before it is written.
      const float* pr = probs + r * classes;
      float* dr = dlogits + r * classes;
      const float label_p = pr[labels[r]];
      for (int64_t c = 0; c < classes; ++c) dr[c] = scale * pr[c];
      dr[labels[r]] = scale * (label_p - 1.f);
    }
  });
}

// sum (pred - target)^2, in double.
double CpuBackend::mse_forward(const float* pred, const float* target, int64_t n) {
  return cpu::block_sum(threads_, n, [=](int64_t i) {
    const double d = static_cast<double>(pred[i]) - static_cast<double>(target[i]);
    return d * d;
  });
}

// dpred = scale * 2 (pred - target).
void CpuBackend::mse_backward(const float* pred, const float* target, float* dpred, int64_t n,
                              float scale) {
  const float k = 2.f * scale;
  cpu::parallel_elements(threads_, n, [=](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) dpred[i] = k * (pred[i] - target[i]);
  });
}

// Rows whose first arg-max equals the label (a label outside [0, classes) never matches).
int64_t CpuBackend::count_correct(const float* logits, const int32_t* labels, int64_t rows,
                                  int64_t classes) {
  if (classes <= 0) return 0;
  std::atomic<int64_t> correct{0};
  cpu::parallel_rows(threads_, rows, classes, [&](int64_t r0, int64_t r1) {
    int64_t mine = 0;
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = logits + r * classes;
      int64_t best = 0;
      for (int64_t c = 1; c < classes; ++c)
        if (xr[c] > xr[best]) best = c;
      mine += best == labels[r];
    }
    correct += mine;
  });
  return correct.load();
}

// ---- vocab-parallel softmax cross-entropy ---------------------------------------------------
// (layers/tensor_parallel/vocab_parallel_cross_entropy.h) Each rank reduces its slice of every
// row to kSoftmaxPartialFloats numbers, the ranks all-gather them, and every rank combines the
// same gathered bytes with the same loop, so all hold the same loss bits.

// partials(rows, 4) of logits(rows, range.count).
void CpuBackend::softmax_partials(const float* logits, const int32_t* labels, float* partials,
                                  int64_t rows, const VocabRange& range) {
  if (range.total > kSoftmaxMaxIndex)
    throw UsageError(fmt::format(
        "softmax_partials: {} classes; the partials carry class indices as floats, exact only "
        "below {}",
        range.total, kSoftmaxMaxIndex));
  check_labels("softmax_partials", labels, rows, range.total);
  cpu::parallel_rows(threads_, rows, range.count, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      softmax_partial_row(logits + r * range.count, range.count, range.first, labels[r],
                          partials + r * kSoftmaxPartialFloats);
  });
}

// For each row: M, S (double) and the label's logit from the parts in part order; the loss
// log S - (z_label - M) as softmax_row forms it; the first maximum over parts in part order
// (a later part wins only when strictly greater, so ties go to the lowest class). Serial:
// parts x rows numbers are little work, and one order keeps the loss the same on every rank.
SoftmaxTotals CpuBackend::softmax_combine(const float* partials, const int32_t* labels, float* norm,
                                          int64_t parts, int64_t rows) {
  SoftmaxTotals totals;
  const int64_t stride = rows * kSoftmaxPartialFloats;  // from one part to the next
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = partials + r * kSoftmaxPartialFloats;
    float mx = row[0], best = row[0], best_at = row[3], label_z = row[2];
    for (int64_t p = 1; p < parts; ++p) {
      const float* part = row + p * stride;
      mx = part[0] > mx ? part[0] : mx;
      if (part[0] > best) {
        best = part[0];
        best_at = part[3];
      }
      label_z += part[2];  // zeros but for the part that holds the label: exact
    }
    double sum = 0.0;
    for (int64_t p = 0; p < parts; ++p) {
      const float* part = row + p * stride;
      sum += static_cast<double>(part[1]) *
             std::exp(static_cast<double>(part[0]) - static_cast<double>(mx));
    }
    if (norm) {
      norm[2 * r] = mx;
      norm[2 * r + 1] = static_cast<float>(sum);
    }
    totals.loss_sum += std::log(sum) - static_cast<double>(label_z - mx);
    totals.correct += static_cast<int64_t>(best_at) == labels[r];
  }
  return totals;
}

// dlogits(rows, range.count) = scale * (exp(z - M) / S - onehot), the probability formed as
// softmax_row forms it (exp_f32, then times 1/S).
void CpuBackend::softmax_xent_backward_slice(const float* logits, const int32_t* labels,
                                             const float* norm, float* dlogits, int64_t rows,
                                             const VocabRange& range, float scale) {
  check_labels("softmax_xent_backward_slice", labels, rows, range.total);
  const int64_t n = range.count;
  cpu::parallel_rows(threads_, rows, n, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* __restrict x = logits + r * n;
      float* __restrict d = dlogits + r * n;
      const float mx = norm[2 * r], inv = 1.f / norm[2 * r + 1];
      for (int64_t c = 0; c < n; ++c) d[c] = scale * (cpu::exp_f32(x[c] - mx) * inv);
      const int64_t local = static_cast<int64_t>(labels[r]) - range.first;
      if (local >= 0 && local < n) d[local] = scale * (cpu::exp_f32(x[local] - mx) * inv - 1.f);
    }
  });
}

}  // namespace pt
