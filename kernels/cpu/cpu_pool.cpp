// Max and average pooling over NCHW planes; each (n, c) plane is independent, so threads split
// planes and every result is the same for any thread count.
#include <algorithm>
#include <limits>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_loops.h"

namespace pt {

namespace {

int64_t planes(const Pool2dShape& s) { return s.N * s.C; }

}  // namespace

// y, argmax (N, C, P, Q); argmax is h*W + w of the window's first maximum within its plane
// (-1, with y = -inf, for a window entirely in the padding).
void CpuBackend::maxpool2d_forward(const Pool2dShape& s, const float* x, float* y,
                                   int32_t* argmax) {
  const int64_t in_plane = s.H * s.W, out_plane = s.P * s.Q;
  cpu::parallel_rows(threads_, planes(s), out_plane * s.R * s.S, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float* xp = x + b * in_plane;
      float* yp = y + b * out_plane;
      int32_t* ap = argmax + b * out_plane;
      for (int64_t p = 0; p < s.P; ++p) {
        const int64_t h0 = p * s.stride_h - s.pad_h;
        const int64_t hb = std::max<int64_t>(h0, 0), he = std::min(h0 + s.R, s.H);
        for (int64_t q = 0; q < s.Q; ++q) {
          const int64_t w0 = q * s.stride_w - s.pad_w;
          const int64_t wb = std::max<int64_t>(w0, 0), we = std::min(w0 + s.S, s.W);
          float best = -std::numeric_limits<float>::infinity();
          int64_t best_at = -1;
          for (int64_t h = hb; h < he; ++h)
            for (int64_t w = wb; w < we; ++w) {
              const float v = xp[h * s.W + w];
              // First maximum wins; a NaN wins over numbers (PyTorch propagates NaN).
              if (best_at < 0 || v > best || (v != v && best == best)) {
                best = v;
                best_at = h * s.W + w;
              }
            }
          yp[p * s.Q + q] = best;
          ap[p * s.Q + q] = static_cast<int32_t>(best_at);
        }
      }
    }
  });
}

// dx (N, C, H, W) = 0, then dx[argmax] += dy for every window (overlapping windows add).
void CpuBackend::maxpool2d_backward(const Pool2dShape& s, const float* dy, const int32_t* argmax,
                                    float* dx) {
  const int64_t in_plane = s.H * s.W, out_plane = s.P * s.Q;
  cpu::parallel_rows(threads_, planes(s), in_plane + out_plane, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      float* dxp = dx + b * in_plane;
      const float* dyp = dy + b * out_plane;
      const int32_t* ap = argmax + b * out_plane;
      std::fill(dxp, dxp + in_plane, 0.f);
      for (int64_t o = 0; o < out_plane; ++o)
        if (ap[o] >= 0) dxp[ap[o]] += dyp[o];
    }
  });
}

namespace {

// PyTorch's divisor with count_include_pad: the window clipped to the padded input, i.e.
// R*S except for windows that reach past the padding (ceil-mode shapes).
int64_t avg_divisor(const Pool2dShape& s, int64_t h0, int64_t w0) {
  const int64_t he = std::min(h0 + s.R, s.H + s.pad_h), we = std::min(w0 + s.S, s.W + s.pad_w);
  return (he - h0) * (we - w0);
}

}  // namespace

// y (N, C, P, Q) = sum of the window's elements / window size counting padding.
void CpuBackend::avgpool2d_forward(const Pool2dShape& s, const float* x, float* y) {
  const int64_t in_plane = s.H * s.W, out_plane = s.P * s.Q;
  cpu::parallel_rows(threads_, planes(s), out_plane * s.R * s.S, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float* xp = x + b * in_plane;
      float* yp = y + b * out_plane;
      for (int64_t p = 0; p < s.P; ++p) {
        const int64_t h0 = p * s.stride_h - s.pad_h;
        const int64_t hb = std::max<int64_t>(h0, 0), he = std::min(h0 + s.R, s.H);
        for (int64_t q = 0; q < s.Q; ++q) {
          const int64_t w0 = q * s.stride_w - s.pad_w;
          const int64_t wb = std::max<int64_t>(w0, 0), we = std::min(w0 + s.S, s.W);
          float sum = 0.f;
          for (int64_t h = hb; h < he; ++h)
            for (int64_t w = wb; w < we; ++w) sum += xp[h * s.W + w];
          yp[p * s.Q + q] = sum / static_cast<float>(avg_divisor(s, h0, w0));
        }
      }
    }
  });
}

// dx (N, C, H, W) = 0, then each window's elements += dy / window size.
void CpuBackend::avgpool2d_backward(const Pool2dShape& s, const float* dy, float* dx) {
  const int64_t in_plane = s.H * s.W, out_plane = s.P * s.Q;
  cpu::parallel_rows(
      threads_, planes(s), in_plane + out_plane * s.R * s.S, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          float* dxp = dx + b * in_plane;
          const float* dyp = dy + b * out_plane;
          std::fill(dxp, dxp + in_plane, 0.f);
          for (int64_t p = 0; p < s.P; ++p) {
            const int64_t h0 = p * s.stride_h - s.pad_h;
            const int64_t hb = std::max<int64_t>(h0, 0), he = std::min(h0 + s.R, s.H);
            for (int64_t q = 0; q < s.Q; ++q) {
              const int64_t w0 = q * s.stride_w - s.pad_w;
              const int64_t wb = std::max<int64_t>(w0, 0), we = std::min(w0 + s.S, s.W);
              const float g = dyp[p * s.Q + q] / static_cast<float>(avg_divisor(s, h0, w0));
              for (int64_t h = hb; h < he; ++h)
                for (int64_t w = wb; w < we; ++w) dxp[h * s.W + w] += g;
            }
          }
        }
      });
}

}  // namespace pt
