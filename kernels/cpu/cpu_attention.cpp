// Causal multi-head self-attention, memory-efficient (flash-attention style) on the CPU.
//
// Layout: qkv (B, T, 3, H, Dh) as one fused QKV Linear writes it, so the rows of q, k and v of
// head h are strided by 3 H Dh; out and dout (B, T, H, Dh) are strided by H Dh; lse (B, H, T).
//
// Forward, per (b, h), query rows in blocks of kQueryBlock, keys in blocks of kKeyBlock up to
// the causal limit, with an online softmax (running max m, running sum l, unnormalised o):
//   s_j = scale q_i . k_j;   m' = max(m, max_j s_j);   c = e^{m - m'}
//   l = c l + sum_j e^{s_j - m'};   o = c o + sum_j e^{s_j - m'} v_j
//   out_i = o / l;   lse_i = m + log l
// Backward recomputes p_ij = e^{s_ij - lse_i} block by block (FlashAttention-2, Dao 2023):
//   D_i = dout_i . out_i;   dp_ij = dout_i . v_j;   ds_ij = p_ij (dp_ij - D_i)
//   dv_j += p_ij dout_i;   dk_j += scale ds_ij q_i;   dq_i += scale ds_ij k_j
// Nothing (T, T) is stored: scratch is a few key blocks per thread.
//
// Vectorisation: each key block is transposed to (Dh, kKeyBlock), so a score row is a sum of
// axpys over contiguous keys; the value and gradient updates are axpys over Dh. No float
// reductions sit in the inner loops, so the loops vectorise without reassociation.
// Determinism: one thread computes one (b, h) in a fixed order, so results do not depend on the
// thread count; the heads of one position write disjoint parts of dqkv.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_loops.h"
#include "kernels/cpu/cpu_math.h"

namespace pt {

namespace {

constexpr int64_t kQueryBlock = 32;
constexpr int64_t kKeyBlock = 64;

// The strided rows of one (b, h): row t of q is q + t * stride.
struct HeadView {
  const float* q;
  const float* k;
  const float* v;
  int64_t stride;  // 3 H Dh
};

HeadView head_view(const float* qkv, int64_t b, int64_t h, int64_t T, int64_t H, int64_t Dh) {
  const int64_t d = H * Dh;
  const float* base = qkv + b * T * 3 * d + h * Dh;
  return {base, base + d, base + 2 * d, 3 * d};
}

// kt (Dh, n) = rows [j0, j0 + n) of x (row stride `stride`), transposed; n <= kKeyBlock, the
// row stride of kt is kKeyBlock.
void transpose_block(const float* x, int64_t stride, int64_t j0, int64_t n, int64_t Dh, float* kt) {
  for (int64_t j = 0; j < n; ++j) {
    const float* row = x + (j0 + j) * stride;
    for (int64_t c = 0; c < Dh; ++c) kt[c * kKeyBlock + j] = row[c];
  }
}

// s (n) = scale * q (Dh) . kt (Dh, n): axpys over contiguous keys.
inline void scores(const float* __restrict q, const float* __restrict kt, int64_t n, int64_t Dh,
                   float scale, float* __restrict s) {
  for (int64_t j = 0; j < n; ++j) s[j] = 0.f;
  for (int64_t c = 0; c < Dh; ++c) {
    const float qc = q[c];
    const float* __restrict kc = kt + c * kKeyBlock;
    for (int64_t j = 0; j < n; ++j) s[j] += qc * kc[j];
  }
  for (int64_t j = 0; j < n; ++j) s[j] *= scale;
}

// y (Dh) += a * x (Dh).
inline void axpy_row(float a, const float* __restrict x, float* __restrict y, int64_t Dh) {
  for (int64_t c = 0; c < Dh; ++c) y[c] += a * x[c];
}

// One (b, h) of the forward pass. scratch: kKeyBlock * Dh (kt) + kKeyBlock (s) +
// kQueryBlock * Dh (o) + 2 kQueryBlock (m, l) floats.
PT_CPU_SIMD_CLONES void attention_forward_head(const HeadView hv, float* out, int64_t out_stride,
                                               float* lse, int64_t T, int64_t Dh, float scale,
                                               float* scratch) {
  float* kt = scratch;
  float* s = kt + kKeyBlock * Dh;
  float* o = s + kKeyBlock;
  float* m = o + kQueryBlock * Dh;
  float* l = m + kQueryBlock;
  for (int64_t i0 = 0; i0 < T; i0 += kQueryBlock) {
    const int64_t i1 = std::min(T, i0 + kQueryBlock);
    std::fill(o, o + (i1 - i0) * Dh, 0.f);
    std::fill(m, m + (i1 - i0), -std::numeric_limits<float>::infinity());
    std::fill(l, l + (i1 - i0), 0.f);
    // Key blocks up to the last query row of this block (causal).
    for (int64_t j0 = 0; j0 < i1; j0 += kKeyBlock) {
      const int64_t j1 = std::min(i1, j0 + kKeyBlock);
      transpose_block(hv.k, hv.stride, j0, j1 - j0, Dh, kt);
      for (int64_t i = std::max(i0, j0); i < i1; ++i) {
        const int64_t n = std::min(j1, i + 1) - j0;  // keys j0 .. min(j1, i + 1) - 1
        const int64_t r = i - i0;
        scores(hv.q + i * hv.stride, kt, n, Dh, scale, s);
        float mx = m[r];
        for (int64_t j = 0; j < n; ++j) mx = s[j] > mx ? s[j] : mx;
        const float c = cpu::exp_f32(m[r] - mx);  // 0 on the first block (m = -inf)
        for (int64_t j = 0; j < n; ++j) s[j] = cpu::exp_f32(s[j] - mx);
        float sum = 0.f;
        for (int64_t j = 0; j < n; ++j) sum += s[j];
        m[r] = mx;
        l[r] = c * l[r] + sum;
        float* __restrict orow = o + r * Dh;
        for (int64_t k = 0; k < Dh; ++k) orow[k] *= c;
        for (int64_t j = 0; j < n; ++j) axpy_row(s[j], hv.v + (j0 + j) * hv.stride, orow, Dh);
      }
    }
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t r = i - i0;
      const float inv = 1.f / l[r];
      float* __restrict dst = out + i * out_stride;
      const float* __restrict orow = o + r * Dh;
      for (int64_t k = 0; k < Dh; ++k) dst[k] = orow[k] * inv;
      lse[i] = m[r] + std::log(l[r]);
    }
  }
}

// One (b, h) of the backward pass; dq/dk/dv point into dqkv with the rows of hv.
// scratch: 2 kKeyBlock * Dh (kt, vt) + 2 kKeyBlock * Dh (dk, dv) + 2 kKeyBlock (p, ds) + T (D).
PT_CPU_SIMD_CLONES void attention_backward_head(const HeadView hv, const float* out,
                                                const float* dout, int64_t out_stride,
                                                const float* lse, float* dq, float* dk, float* dv,
                                                int64_t T, int64_t Dh, float scale,
                                                float* scratch) {
  float* kt = scratch;
  float* vt = kt + kKeyBlock * Dh;
  float* dkb = vt + kKeyBlock * Dh;
  float* dvb = dkb + kKeyBlock * Dh;
  float* p = dvb + kKeyBlock * Dh;
  float* ds = p + kKeyBlock;
  float* D = ds + kKeyBlock;
  // D_i = dout_i . out_i, and dq starts at zero (it accumulates over key blocks).
  for (int64_t i = 0; i < T; ++i) {
    const float* __restrict o = out + i * out_stride;
    const float* __restrict g = dout + i * out_stride;
    float acc = 0.f;
    for (int64_t c = 0; c < Dh; ++c) acc += o[c] * g[c];
    D[i] = acc;
    std::fill(dq + i * hv.stride, dq + i * hv.stride + Dh, 0.f);
  }
  for (int64_t j0 = 0; j0 < T; j0 += kKeyBlock) {
    const int64_t j1 = std::min(T, j0 + kKeyBlock);
    const int64_t nb = j1 - j0;
    transpose_block(hv.k, hv.stride, j0, nb, Dh, kt);
    transpose_block(hv.v, hv.stride, j0, nb, Dh, vt);
    std::fill(dkb, dkb + nb * Dh, 0.f);
    std::fill(dvb, dvb + nb * Dh, 0.f);
    // Query rows that see at least one key of this block (causal: i >= j0).
    for (int64_t i = j0; i < T; ++i) {
      const int64_t n = std::min(j1, i + 1) - j0;
      const float* q = hv.q + i * hv.stride;
      const float* g = dout + i * out_stride;
      scores(q, kt, n, Dh, scale, p);
      for (int64_t j = 0; j < n; ++j) p[j] = cpu::exp_f32(p[j] - lse[i]);
      scores(g, vt, n, Dh, 1.f, ds);  // dp_ij = dout_i . v_j
      for (int64_t j = 0; j < n; ++j) ds[j] = p[j] * (ds[j] - D[i]);
      float* dqi = dq + i * hv.stride;
      for (int64_t j = 0; j < n; ++j) {
        axpy_row(p[j], g, dvb + j * Dh, Dh);
        axpy_row(scale * ds[j], q, dkb + j * Dh, Dh);
        axpy_row(scale * ds[j], hv.k + (j0 + j) * hv.stride, dqi, Dh);
      }
    }
    for (int64_t j = 0; j < nb; ++j) {
      std::copy(dkb + j * Dh, dkb + (j + 1) * Dh, dk + (j0 + j) * hv.stride);
      std::copy(dvb + j * Dh, dvb + (j + 1) * Dh, dv + (j0 + j) * hv.stride);
    }
  }
}

// Calls body(b, h, scratch) for every (b, h) of B x H, spread over `threads` threads, each with
// its own `scratch_floats` of scratch. Thread ids come from this function's own parallel region,
// so the scratch index is right even when the caller is itself inside an OpenMP region.
template <class Body>
void for_each_head(int threads, int64_t B, int64_t H, int64_t work, int64_t scratch_floats,
                   Body&& body) {
  const int nt = threads > 1 && work >= cpu::kParallelMin && B * H > 1 ? threads : 1;
  std::vector<float> buffers(static_cast<size_t>(nt * scratch_floats));
#pragma omp parallel num_threads(nt)
  {
    float* mine = buffers.data() + omp_get_thread_num() * scratch_floats;
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < B * H; ++bh) body(bh / H, bh % H, mine);
  }
}

}  // namespace

void CpuBackend::attention_forward(const float* qkv, float* out, float* lse, int64_t B, int64_t T,
                                   int64_t H, int64_t Dh, float scale) {
  const int64_t d = H * Dh;
  const int64_t scratch = kKeyBlock * Dh + kKeyBlock + kQueryBlock * Dh + 2 * kQueryBlock;
  const int64_t work = B * H * T * T * Dh;  // two (T, T, Dh) products, halved by causality
  for_each_head(threads_, B, H, work, scratch, [=](int64_t b, int64_t h, float* mine) {
    attention_forward_head(head_view(qkv, b, h, T, H, Dh), out + b * T * d + h * Dh, d,
                           lse + (b * H + h) * T, T, Dh, scale, mine);
  });
}

void CpuBackend::attention_backward(const float* qkv, const float* out, const float* dout,
                                    const float* lse, float* dqkv, int64_t B, int64_t T, int64_t H,
                                    int64_t Dh, float scale) {
  const int64_t d = H * Dh;
  const int64_t scratch = 4 * kKeyBlock * Dh + 2 * kKeyBlock + T;
  const int64_t work = 2 * B * H * T * T * Dh;  // five (T, T, Dh) products, halved by causality
  for_each_head(threads_, B, H, work, scratch, [=](int64_t b, int64_t h, float* mine) {
    float* dq = dqkv + b * T * 3 * d + h * Dh;  // (B, T, 3, H, Dh): q, k, v parts d apart
    const int64_t o = b * T * d + h * Dh;
    attention_backward_head(head_view(qkv, b, h, T, H, Dh), out + o, dout + o, d,
                            lse + (b * H + h) * T, dq, dq + d, dq + 2 * d, T, Dh, scale, mine);
  });
}

}  // namespace pt
