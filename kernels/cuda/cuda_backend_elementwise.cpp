// CudaBackend's elementwise ops (fill, add, axpy, scale, bias, activations, dropout): each one
// kernel launch on the compute stream, nothing to read back.
#include "kernels/cuda/cuda_backend.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/fill.h"

namespace pt::cuda {

// ---- elementwise ----------------------------------------------------------------------------

void CudaBackend::fill(float* x, float value, int64_t n) {
  DeviceGuard guard(device_);
  check(launch_fill(x, value, n, compute_), "launch_fill");
}
void CudaBackend::add(const float* a, const float* b, float* y, int64_t n) {
  DeviceGuard guard(device_);
  check(launch_add(a, b, y, n, compute_), "launch_add");
}
void CudaBackend::axpy(float alpha, const float* x, float* y, int64_t n) {
  DeviceGuard guard(device_);
  check(launch_axpy(alpha, x, y, n, compute_), "launch_axpy");
}
void CudaBackend::scale(float alpha, float* x, int64_t n) {
  DeviceGuard guard(device_);
  check(launch_scale(alpha, x, n, compute_), "launch_scale");
}
void CudaBackend::add_bias(float* y, const float* bias, int64_t rows, int64_t cols) {
  DeviceGuard guard(device_);
  check(launch_add_bias(y, bias, rows, cols, compute_), "launch_add_bias");
}
void CudaBackend::sum_rows_accumulate(const float* x, float* out, int64_t rows, int64_t cols) {
  DeviceGuard guard(device_);
  check(launch_sum_rows_accumulate(x, out, rows, cols, compute_), "launch_sum_rows_accumulate");
}
void CudaBackend::activation_forward(Activation f, const float* x, float* y, int64_t n) {
  DeviceGuard guard(device_);
  check(launch_activation_forward(f, x, y, n, compute_), "launch_activation_forward");
}
void CudaBackend::activation_backward(Activation f, const float* x, const float* y, const float* dy,
                                      float* dx, int64_t n) {
  DeviceGuard guard(device_);
  check(launch_activation_backward(f, x, y, dy, dx, n, compute_), "launch_activation_backward");
}
void CudaBackend::dropout_forward(const float* x, float* y, int64_t n, float p, uint64_t key) {
  DeviceGuard guard(device_);
  check(launch_dropout_forward(x, y, n, p, key, compute_), "launch_dropout_forward");
}
void CudaBackend::dropout_backward(const float* dy, float* dx, int64_t n, float p, uint64_t key) {
  DeviceGuard guard(device_);
  check(launch_dropout_backward(dy, dx, n, p, key, compute_), "launch_dropout_backward");
}

}  // namespace pt::cuda
