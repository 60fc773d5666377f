// CudaBackend's losses and accuracy: per-row or per-block partials read back and summed on the
// host in a fixed order; a label outside the classes is a UsageError naming its row. Also the
// vocab-parallel cross-entropy's three steps (Backend::softmax_partials and the two after it).
#include "kernels/cuda/cuda_backend.h"

#include <cstring>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/loss.h"
#include "kernels/cuda/reduce.h"

namespace pt::cuda {

// ---- losses ---------------------------------------------------------------------------------

double CudaBackend::softmax_xent_forward(const float* logits, const int32_t* labels, float* probs,
                                         int64_t rows, int64_t classes) {
  if (rows == 0) return 0.0;
  DeviceGuard guard(device_);
  // Per-row losses and the first bad row come back to the host, which adds them in row order.
  auto* row_loss = static_cast<double*>(
      scratch(partials_, static_cast<size_t>(rows + 1) * sizeof(double), "loss partials"));
  int* first_bad = reinterpret_cast<int*>(row_loss + rows);
  check(launch_softmax_xent_forward(logits, labels, probs, row_loss, first_bad, rows, classes,
                                    compute_),
        "launch_softmax_xent_forward");
  std::vector<double> host(static_cast<size_t>(rows) + 1);
  read_back(host.data(), row_loss, host.size() * sizeof(double));
  int bad = 0;
  std::memcpy(&bad, &host[static_cast<size_t>(rows)], sizeof(int));
  if (bad < rows) {
    int32_t label = 0;
    read_back(&label, labels + bad, sizeof(label));
    throw UsageError(
        fmt::format("label {} of row {} is outside [0, {}): the data's labels do not match the "
                    "model's {} classes",
                    label, bad, classes, classes));
  }
  return std::accumulate(host.begin(), host.begin() + rows, 0.0);
}
void CudaBackend::softmax_xent_backward(const float* probs, const int32_t* labels, float* dlogits,
                                        int64_t rows, int64_t classes, float scale) {
  DeviceGuard guard(device_);
  check(launch_softmax_xent_backward(probs, labels, dlogits, rows, classes, scale, compute_),
        "launch_softmax_xent_backward");
}
double CudaBackend::mse_forward(const float* pred, const float* target, int64_t n) {
  if (n == 0) return 0.0;
  DeviceGuard guard(device_);
  auto* partials =
      static_cast<double*>(scratch(partials_, kReduceBlocks * sizeof(double), "loss partials"));
  check(launch_sum_squared_difference(pred, target, n, partials, compute_),
        "launch_sum_squared_difference");
  std::vector<double> host(kReduceBlocks);
  read_back(host.data(), partials, host.size() * sizeof(double));
  return std::accumulate(host.begin(), host.end(), 0.0);
}
void CudaBackend::mse_backward(const float* pred, const float* target, float* dpred, int64_t n,
                               float scale) {
  DeviceGuard guard(device_);
  check(launch_mse_backward(pred, target, dpred, n, scale, compute_), "launch_mse_backward");
}
int64_t CudaBackend::count_correct(const float* logits, const int32_t* labels, int64_t rows,
                                   int64_t classes) {
  if (rows == 0) return 0;
  DeviceGuard guard(device_);
  auto* count =
      static_cast<unsigned long long*>(scratch(partials_, sizeof(unsigned long long), "count"));
  check(launch_count_correct(logits, labels, rows, classes, count, compute_),
        "launch_count_correct");
  unsigned long long host = 0;
  read_back(&host, count, sizeof(host));
  return static_cast<int64_t>(host);
}

// ---- vocab-parallel softmax cross-entropy ---------------------------------------------------

void CudaBackend::softmax_partials(const float* logits, const int32_t* labels, float* partials,
                                   int64_t rows, const VocabRange& range) {
  if (range.total > kSoftmaxMaxIndex)
    throw UsageError(fmt::format(
        "softmax_partials: {} classes; the partials carry class indices as floats, exact only "
        "below {}",
        range.total, kSoftmaxMaxIndex));
  if (rows == 0) return;
  DeviceGuard guard(device_);
  int* first_bad = static_cast<int*>(scratch(partials_, sizeof(int), "label check"));
  check(launch_softmax_partials(logits, labels, partials, first_bad, rows, range.first, range.count,
                                range.total, compute_),
        "launch_softmax_partials");
  // Every rank checks the same labels, so all refuse a bad batch before the all-gather.
  int bad = 0;
  read_back(&bad, first_bad, sizeof(bad));
  if (bad < rows) {
    int32_t label = 0;
    read_back(&label, labels + bad, sizeof(label));
    throw UsageError(
        fmt::format("label {} of row {} is outside [0, {}): the data's labels do not match the "
                    "model's {} classes",
                    label, bad, range.total, range.total));
  }
}
SoftmaxTotals CudaBackend::softmax_combine(const float* partials, const int32_t* labels,
                                           float* norm, int64_t parts, int64_t rows) {
  if (rows == 0) return {};
  DeviceGuard guard(device_);
  // Per-row losses and the count come back to the host, which adds the losses in row order.
  auto* row_loss = static_cast<double*>(
      scratch(partials_, static_cast<size_t>(rows + 1) * sizeof(double), "loss partials"));
  auto* correct = reinterpret_cast<unsigned long long*>(row_loss + rows);
  check(launch_softmax_combine(partials, labels, norm, row_loss, correct, parts, rows, compute_),
        "launch_softmax_combine");
  std::vector<double> host(static_cast<size_t>(rows) + 1);
  read_back(host.data(), row_loss, host.size() * sizeof(double));
  unsigned long long count = 0;
  std::memcpy(&count, &host[static_cast<size_t>(rows)], sizeof(count));
  SoftmaxTotals totals;
  totals.loss_sum = std::accumulate(host.begin(), host.begin() + rows, 0.0);
  totals.correct = static_cast<int64_t>(count);
  return totals;
}
void CudaBackend::softmax_xent_backward_slice(const float* logits, const int32_t* labels,
                                              const float* norm, float* dlogits, int64_t rows,
                                              const VocabRange& range, float scale) {
  DeviceGuard guard(device_);
  check(launch_softmax_xent_backward_slice(logits, labels, norm, dlogits, rows, range.first,
                                           range.count, scale, compute_),
        "launch_softmax_xent_backward_slice");
}

}  // namespace pt::cuda
