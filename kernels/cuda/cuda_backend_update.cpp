// CudaBackend's ops of the step's end: the gradient norm's sum of squares, the finite check and
// the optimizer updates (SGD, AdamW), with the CPU backend's argument checks.
#include "kernels/cuda/cuda_backend.h"

#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/optimizer.h"
#include "kernels/cuda/reduce.h"

namespace pt::cuda {

// ---- reductions and optimizer updates -------------------------------------------------------

double CudaBackend::sum_squares(const float* x, int64_t n) {
  if (n == 0) return 0.0;
  double sum = 0;
  sum_squares_each(&x, &n, 1, &sum);
  return sum;
}
void CudaBackend::sum_squares_each(const float* const* xs, const int64_t* ns, size_t count,
                                   double* sums) {
  if (count == 0) return;
  DeviceGuard guard(device_);
  // Every tensor's partials queued side by side, one read-back; each sum adds its own partials
  // in index order (reduce.h), so a tensor's sum has the same bits alone or in a list.
  auto* partials = static_cast<double*>(
      scratch(partials_, count * kReduceBlocks * sizeof(double), "norm partials"));
  for (size_t k = 0; k < count; ++k)
    check(launch_sum_squares(xs[k], ns[k], partials + k * kReduceBlocks, compute_),
          "launch_sum_squares");
  std::vector<double> host(count * kReduceBlocks);
  read_back(host.data(), partials, host.size() * sizeof(double));
  for (size_t k = 0; k < count; ++k) {
    const auto first = host.begin() + static_cast<std::ptrdiff_t>(k * kReduceBlocks);
    sums[k] = ns[k] == 0 ? 0.0 : std::accumulate(first, first + kReduceBlocks, 0.0);
  }
}
bool CudaBackend::all_finite(const float* x, int64_t n) {
  if (n == 0) return true;
  DeviceGuard guard(device_);
  int* flag = static_cast<int*>(scratch(partials_, sizeof(int), "finite check"));
  check(launch_count_nonfinite(x, n, flag, compute_), "launch_count_nonfinite");
  int host = 0;
  read_back(&host, flag, sizeof(host));
  return host == 0;
}
void CudaBackend::sgd_update(const float* param, const float* grad, float* param_out,
                             float* momentum_buf, int64_t n, const SgdParams& p) {
  // The CPU backend's argument checks, as usage errors rather than a CUDA error code.
  require_in_place_or_disjoint("sgd_update", param, param_out, n);
  if (p.momentum != 0.f && momentum_buf == nullptr)
    throw UsageError(fmt::format(
        "sgd_update: momentum is {} but no momentum buffer was given; allocate one of {} "
        "floats",
        p.momentum, n));
  DeviceGuard guard(device_);
  check(launch_sgd_update(param, grad, param_out, momentum_buf, n, p, compute_),
        "launch_sgd_update");
}
void CudaBackend::adamw_update(const float* param, const float* grad, float* param_out, float* m,
                               float* v, int64_t n, const AdamWParams& p) {
  if (p.step < 1)
    throw UsageError(fmt::format("adamw_update: step must count from 1, got {}", p.step));
  require_in_place_or_disjoint("adamw_update", param, param_out, n);
  DeviceGuard guard(device_);
  check(launch_adamw_update(param, grad, param_out, m, v, n, p, compute_), "launch_adamw_update");
}

}  // namespace pt::cuda
