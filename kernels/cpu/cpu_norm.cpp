// Layer normalisation over the last dimension (PyTorch: biased variance, eps inside the sqrt).
#include <cmath>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_loops.h"
#include "kernels/cpu/cpu_math.h"

namespace pt {

namespace {

// Rows [r0, r1) of the forward pass.
PT_CPU_SIMD_CLONES void layernorm_forward_rows(const float* x, const float* gamma,
                                               const float* beta, float* y, float* mean,
                                               float* rstd, int64_t r0, int64_t r1, int64_t cols,
                                               float eps) {
  const float inv_cols = 1.f / static_cast<float>(cols);
  for (int64_t r = r0; r < r1; ++r) {
    const float* __restrict xr = x + r * cols;
    float* __restrict yr = y + r * cols;
    const float mu = cpu::sum_f32(xr, cols) * inv_cols;
    // Two passes: the variance of (x - mu) does not cancel catastrophically.
    float acc[16] = {};
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16)
      for (int j = 0; j < 16; ++j) {
        const float d = xr[c + j] - mu;
        acc[j] += d * d;
      }
    float ss = 0.f;
    for (int j = 0; j < 16; ++j) ss += acc[j];
    for (; c < cols; ++c) ss += (xr[c] - mu) * (xr[c] - mu);
    const float rs = 1.f / std::sqrt(ss * inv_cols + eps);
    mean[r] = mu;
    rstd[r] = rs;
    for (c = 0; c < cols; ++c) yr[c] = (xr[c] - mu) * rs * gamma[c] + beta[c];
  }
}

// Rows [r0, r1) of the input gradient.
PT_CPU_SIMD_CLONES void layernorm_backward_input_rows(const float* dy, const float* x,
                                                      const float* gamma, const float* mean,
                                                      const float* rstd, float* dx, int64_t r0,
                                                      int64_t r1, int64_t cols) {
  const float inv_cols = 1.f / static_cast<float>(cols);
  for (int64_t r = r0; r < r1; ++r) {
    const float* __restrict dyr = dy + r * cols;
    const float* __restrict xr = x + r * cols;
    float* __restrict dxr = dx + r * cols;
    const float mu = mean[r], rs = rstd[r];
    float acc_g[16] = {}, acc_gx[16] = {};
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16)
      for (int j = 0; j < 16; ++j) {
        const float g = dyr[c + j] * gamma[c + j];
        acc_g[j] += g;
        acc_gx[j] += g * ((xr[c + j] - mu) * rs);
      }
    float sum_g = 0.f, sum_gx = 0.f;
    for (int j = 0; j < 16; ++j) {
      sum_g += acc_g[j];
      sum_gx += acc_gx[j];
    }
    for (; c < cols; ++c) {
      const float g = dyr[c] * gamma[c];
      sum_g += g;
      sum_gx += g * ((xr[c] - mu) * rs);
    }
    const float mean_g = sum_g * inv_cols, mean_gx = sum_gx * inv_cols;
    for (c = 0; c < cols; ++c) {
      const float xhat = (xr[c] - mu) * rs;
      dxr[c] = rs * (dyr[c] * gamma[c] - mean_g - xhat * mean_gx);
    }
  }
}

// Columns [c0, c1) of the weight gradients, rows summed in order.
PT_CPU_SIMD_CLONES void layernorm_backward_weight_block(const float* dy, const float* x,
                                                        const float* mean, const float* rstd,
                                                        float* dgamma, float* dbeta, int64_t rows,
                                                        int64_t cols, int64_t c0, int64_t c1) {
  float acc_g[cpu::kColumnBlock] = {}, acc_b[cpu::kColumnBlock] = {};
  const int64_t w = c1 - c0;
  // Two rows per pass (fewer loads/stores of the accumulators); rows still add in order.
  int64_t r = 0;
  for (; r + 2 <= rows; r += 2) {
    const float* __restrict dy0 = dy + r * cols + c0;
    const float* __restrict x0 = x + r * cols + c0;
    const float* __restrict dy1 = dy0 + cols;
    const float* __restrict x1 = x0 + cols;
    const float mu0 = mean[r], rs0 = rstd[r], mu1 = mean[r + 1], rs1 = rstd[r + 1];
    for (int64_t c = 0; c < w; ++c) {
      acc_g[c] = (acc_g[c] + dy0[c] * ((x0[c] - mu0) * rs0)) + dy1[c] * ((x1[c] - mu1) * rs1);
      acc_b[c] = (acc_b[c] + dy0[c]) + dy1[c];
    }
  }
  for (; r < rows; ++r) {
    const float* __restrict dyr = dy + r * cols + c0;
    const float* __restrict xr = x + r * cols + c0;
    const float mu = mean[r], rs = rstd[r];
    for (int64_t c = 0; c < w; ++c) {
      acc_g[c] += dyr[c] * ((xr[c] - mu) * rs);
      acc_b[c] += dyr[c];
    }
  }
  for (int64_t c = 0; c < w; ++c) {
    dgamma[c0 + c] += acc_g[c];
    dbeta[c0 + c] += acc_b[c];
  }
}

}  // namespace

// y(rows, cols) = (x - mean) * rstd * gamma + beta; mean, rstd (rows) saved for backward.
void CpuBackend::layernorm_forward(const float* x, const float* gamma, const float* beta, float* y,
                                   float* mean, float* rstd, int64_t rows, int64_t cols,
                                   float eps) {
  cpu::parallel_rows(threads_, rows, cols, [=](int64_t r0, int64_t r1) {
    layernorm_forward_rows(x, gamma, beta, y, mean, rstd, r0, r1, cols, eps);
  });
}

// With xhat = (x - mean) rstd and g = dy * gamma:
// dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)).
void CpuBackend::layernorm_backward_input(const float* dy, const float* x, const float* gamma,
                                          const float* mean, const float* rstd, float* dx,
                                          int64_t rows, int64_t cols) {
  cpu::parallel_rows(threads_, rows, cols, [=](int64_t r0, int64_t r1) {
    layernorm_backward_input_rows(dy, x, gamma, mean, rstd, dx, r0, r1, cols);
  });
}

// dgamma(cols) += sum_r dy * xhat; dbeta(cols) += sum_r dy. Column blocks sum rows in order.
void CpuBackend::layernorm_backward_weight(const float* dy, const float* x, const float* mean,
                                           const float* rstd, float* dgamma, float* dbeta,
                                           int64_t rows, int64_t cols) {
  cpu::parallel_column_blocks(threads_, rows, cols, [=](int64_t c0, int64_t c1) {
    layernorm_backward_weight_block(dy, x, mean, rstd, dgamma, dbeta, rows, cols, c0, c1);
  });
}

}  // namespace pt
