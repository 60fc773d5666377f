// Elementwise ops, bias add/reduce and dropout: plain loops the compiler vectorises.
#include "engine/core/random.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_loops.h"
#include "kernels/cpu/cpu_math.h"

namespace pt {

using cpu::parallel_elements;

void CpuBackend::fill(float* x, float value, int64_t n) {
  parallel_elements(threads_, n, [=](int64_t i0, int64_t i1) {
    float* __restrict px = x;
    for (int64_t i = i0; i < i1; ++i) px[i] = value;
  });
}

// y = a + b (y may alias a or b, so no restrict on the inputs).
void CpuBackend::add(const float* a, const float* b, float* y, int64_t n) {
  parallel_elements(threads_, n, [=](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) y[i] = a[i] + b[i];
  });
}

// y += alpha x.
void CpuBackend::axpy(float alpha, const float* x, float* y, int64_t n) {
  parallel_elements(threads_, n, [=](int64_t i0, int64_t i1) {
    const float* __restrict px = x;
    float* __restrict py = y;
    for (int64_t i = i0; i < i1; ++i) py[i] += alpha * px[i];
  });
}

// x *= alpha.
void CpuBackend::scale(float alpha, float* x, int64_t n) {
  parallel_elements(threads_, n, [=](int64_t i0, int64_t i1) {
    float* __restrict px = x;
    for (int64_t i = i0; i < i1; ++i) px[i] *= alpha;
  });
}

// y(rows, cols) += bias(cols).
void CpuBackend::add_bias(float* y, const float* bias, int64_t rows, int64_t cols) {
  cpu::parallel_rows(threads_, rows, cols, [=](int64_t r0, int64_t r1) {
    const float* __restrict b = bias;
    for (int64_t r = r0; r < r1; ++r) {
      float* __restrict yr = y + r * cols;
      for (int64_t c = 0; c < cols; ++c) yr[c] += b[c];
    }
  });
}

namespace {

// acc[0, w) = sum over rows of x(rows, stride)[., c0 + c], rows added strictly in order; four
// rows per pass so acc is loaded and stored a quarter as often (the same sums, bit for bit).
PT_CPU_SIMD_CLONES void column_sums(const float* x, int64_t rows, int64_t stride, int64_t c0,
                                    int64_t w, float* __restrict acc) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* __restrict x0 = x + r * stride + c0;
    const float* __restrict x1 = x0 + stride;
    const float* __restrict x2 = x1 + stride;
    const float* __restrict x3 = x2 + stride;
    for (int64_t c = 0; c < w; ++c) acc[c] = (((acc[c] + x0[c]) + x1[c]) + x2[c]) + x3[c];
  }
  for (; r < rows; ++r) {
    const float* __restrict xr = x + r * stride + c0;
    for (int64_t c = 0; c < w; ++c) acc[c] += xr[c];
  }
}

}  // namespace

// out(cols) += sum_r x(rows, cols). Each column block sums its rows in order (see cpu_loops.h).
void CpuBackend::sum_rows_accumulate(const float* x, float* out, int64_t rows, int64_t cols) {
  cpu::parallel_column_blocks(threads_, rows, cols, [=](int64_t c0, int64_t c1) {
    float acc[cpu::kColumnBlock] = {};
    column_sums(x, rows, cols, c0, c1 - c0, acc);
    for (int64_t c = c0; c < c1; ++c) out[c] += acc[c - c0];
  });
}

// ---- dropout ------------------------------------------------------------------------------
// Element i is kept iff counter_uniform(key, i) >= p, and kept elements are multiplied by the
// float 1/(1-p); the CUDA kernel computes the same mask and scale, so both agree bit for bit.

namespace {

// out[i] = keep(first + i) ? in[i] * keep_scale : 0, i in [0, n).
PT_CPU_SIMD_CLONES void dropout_loop(const float* __restrict in, float* __restrict out, int64_t n,
                                     uint64_t first, float p, float keep_scale, uint64_t key) {
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = counter_uniform(key, first + static_cast<uint64_t>(i)) >= p;
    out[i] = keep ? in[i] * keep_scale : 0.f;
  }
}

void dropout_apply(int threads, const float* in, float* out, int64_t n, float p, uint64_t key) {
  const float keep_scale = p < 1.f ? 1.f / (1.f - p) : 0.f;
  cpu::parallel_chunks(threads, n, n * 4, 16, [=](int64_t i0, int64_t i1) {
    dropout_loop(in + i0, out + i0, i1 - i0, static_cast<uint64_t>(i0), p, keep_scale, key);
  });
}

}  // namespace

void CpuBackend::dropout_forward(const float* x, float* y, int64_t n, float p, uint64_t key) {
  dropout_apply(threads_, x, y, n, p, key);
}

void CpuBackend::dropout_backward(const float* dy, float* dx, int64_t n, float p, uint64_t key) {
  dropout_apply(threads_, dy, dx, n, p, key);
}

}  // namespace pt
