// Losses: softmax cross-entropy, mean squared error, and the accuracy count.
#include <atomic>
#include <cmath>
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
      const float* __restrict pr = probs + r * classes;
      float* __restrict dr = dlogits + r * classes;
      for (int64_t c = 0; c < classes; ++c) dr[c] = scale * pr[c];
      dr[labels[r]] = scale * (pr[labels[r]] - 1.f);
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

}  // namespace pt
