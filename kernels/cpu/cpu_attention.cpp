// Causal multi-head self-attention on the CPU, flash-attention style (nothing (T, T) is stored).
//
// Layout: qkv (B, T, 3, H, Dh) as one fused QKV Linear writes it, so the rows of q, k and v of
// head h are strided by 3 H Dh; out and dout (B, T, H, Dh) are strided by H Dh; lse (B, H, T).
//
// Forward, per (b, h) and tile of 4 query rows i, over the keys j <= i (FlashAttention-2's
// forward with the whole key range of a tile at once, so no running rescale is needed):
//   s_ij = scale q_i . k_j;  m_i = max_j s_ij;  p_ij = e^{s_ij - m_i};  l_i = sum_j p_ij
//   out_i = (sum_j p_ij v_j) / l_i;  lse_i = m_i + log l_i
// Backward recomputes p_ij = e^{s_ij - lse_i} for a tile of kQueryTile rows (FlashAttention-2,
// Dao 2023):
//   D_i = dout_i . out_i;  dp_ij = dout_i . v_j;  ds_ij = p_ij (dp_ij - D_i)
//   dq_i = scale sum_j ds_ij k_j;  dk_j += scale sum_i ds_ij q_i;  dv_j += sum_i p_ij dout_i
// Scratch per thread is O(T Dh): one head's k (and v, in the backward) transposed, kQueryTile
// score rows; when Dh is not a multiple of 16 also zero-padded copies of the rows the tiles read
// and write (else they use the rows of qkv, dout and dqkv in place).
//
// Speed: every product above is one register-blocked micro-kernel (tile_product): a tile of up
// to 4 rows x 4 vectors of 16 columns accumulates in registers over the whole reduction, one
// broadcast of A per row and one load of B per vector for each step of the reduction (the shape
// of a GEMM micro-kernel, as the best CPU flash-attention kernels use). Scores past the causal
// limit are skipped 16 keys at a time and masked by a select; the products with p and ds read
// only the keys (or query rows) each row (or key) sees, so a non-finite value never meets a
// masked zero. The vectors are GCC vector extensions, so the AVX-512, AVX2 and baseline clones
// (PT_CPU_SIMD_CLONES) all come from one source.
// Determinism: every output element of a product is one sum over the reduction index in
// increasing order, lane by lane, whatever the tile shape or the vector width (dk and dv add one
// such sum per query tile, in tile order), so all clones give the same bits (no FMA:
// -ffp-contract=off). One thread computes one (b, h), so results do not depend on the thread
// count; the heads of one position write disjoint parts of dqkv.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_loops.h"
#include "kernels/cpu/cpu_math.h"

namespace pt {

namespace {

// 16 floats, one AVX-512 register (two AVX2, four SSE ones in the other clones).
typedef float Vec16 __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;
constexpr int kTileRows = 4;        // rows of a register tile
constexpr int kTileVectors = 4;     // vectors of 16 columns of a register tile (AVX-512)
constexpr int64_t kQueryTile = 32;  // query rows per backward step (rows of the p and ds tiles)

constexpr int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// C (R, 16 NV) = [C +] sum over k < K of A(r, k) B(k, :), with A(r, k) = a[r ar + k ak], the
// rows of B ldb floats apart and those of C ldc apart. The R x NV accumulators stay in registers
// for the whole reduction; k runs in increasing order and C is added at the end (same bits for
// any R and NV).
template <int R, int NV>
[[gnu::always_inline]] inline void tile(int64_t K, const float* a, int64_t ar, int64_t ak,
                                        const float* b, int64_t ldb, float* c, int64_t ldc,
                                        bool add) {
  Vec16 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = Vec16{};
  for (int64_t k = 0; k < K; ++k) {
    Vec16 bv[NV];
    for (int v = 0; v < NV; ++v) std::memcpy(&bv[v], b + k * ldb + v * kLanes, sizeof(Vec16));
    for (int r = 0; r < R; ++r) {
      const float s = a[r * ar + k * ak];
      for (int v = 0; v < NV; ++v) acc[r][v] += s * bv[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) {
      float* dst = c + r * ldc + v * kLanes;
      if (add) {
        Vec16 old;
        std::memcpy(&old, dst, sizeof(Vec16));
        acc[r][v] = old + acc[r][v];
      }
      std::memcpy(dst, &acc[r][v], sizeof(Vec16));
    }
}

template <int R>
[[gnu::always_inline]] inline void tile_rows(int nv, int64_t K, const float* a, int64_t ar,
                                             int64_t ak, const float* b, int64_t ldb, float* c,
                                             int64_t ldc, bool add) {
  switch (nv) {
    case 1: tile<R, 1>(K, a, ar, ak, b, ldb, c, ldc, add); break;
    case 2: tile<R, 2>(K, a, ar, ak, b, ldb, c, ldc, add); break;
    case 3: tile<R, 3>(K, a, ar, ak, b, ldb, c, ldc, add); break;
    default: tile<R, 4>(K, a, ar, ak, b, ldb, c, ldc, add); break;
  }
}

// Register tiles wider than the machine's vector file spill: AVX-512 holds 4 x 4 vectors of 16
// (16 of its 32 registers); AVX2 and SSE hold 4 x 1 (8 and 16 of their 16 registers). The tile
// shape does not change any result (see tile()).
int max_tile_vectors() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const int n = __builtin_cpu_supports("avx512f") ? kTileVectors : 1;
  return n;
#else
  return kTileVectors;
#endif
}

// C (M, 16 N) = [C +] A (M, K) B (K, 16 N) in register tiles (A, B, C as in tile()).
PT_CPU_SIMD_CLONES void tile_product(int64_t M, int64_t N, int64_t K, const float* a, int64_t ar,
                                     int64_t ak, const float* b, int64_t ldb, float* c, int64_t ldc,
                                     bool add) {
  const int64_t wide = max_tile_vectors();
  for (int64_t v0 = 0; v0 < N; v0 += wide) {
    const int nv = static_cast<int>(std::min(wide, N - v0));
    for (int64_t r0 = 0; r0 < M; r0 += kTileRows) {
      const float* ar0 = a + r0 * ar;
      const float* b0 = b + v0 * kLanes;
      float* c0 = c + r0 * ldc + v0 * kLanes;
      switch (std::min<int64_t>(kTileRows, M - r0)) {
        case 1: tile_rows<1>(nv, K, ar0, ar, ak, b0, ldb, c0, ldc, add); break;
        case 2: tile_rows<2>(nv, K, ar0, ar, ak, b0, ldb, c0, ldc, add); break;
        case 3: tile_rows<3>(nv, K, ar0, ar, ak, b0, ldb, c0, ldc, add); break;
        default: tile_rows<4>(nv, K, ar0, ar, ak, b0, ldb, c0, ldc, add); break;
      }
    }
  }
}

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

// Asks for rows [j0, j1) of x (Dh floats each, `stride` apart) to be loaded into the cache: a
// head's rows are 3 H Dh floats apart, a stride the hardware prefetchers do not follow across
// pages, so each first touch would otherwise wait on L3 or memory.
inline void prefetch_rows(const float* x, int64_t stride, int64_t j0, int64_t j1, int64_t Dh) {
  for (int64_t j = j0; j < j1; ++j)
    for (int64_t c = 0; c < Dh; c += 16) __builtin_prefetch(x + j * stride + c);
}

// r (16 x 16) transposed in place: four rounds of interleaving rows i and i + 8 (a perfect
// shuffle; after four the rows are the columns). One two-source permute each on AVX-512.
[[gnu::always_inline]] inline void transpose16(Vec16 (&r)[kLanes]) {
  for (int round = 0; round < 4; ++round) {
    Vec16 t[kLanes];
    for (int i = 0; i < 8; ++i) {
      t[2 * i] = __builtin_shufflevector(r[i], r[i + 8], 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21,
                                         6, 22, 7, 23);
      t[2 * i + 1] = __builtin_shufflevector(r[i], r[i + 8], 8, 24, 9, 25, 10, 26, 11, 27, 12, 28,
                                             13, 29, 14, 30, 15, 31);
    }
    for (int i = 0; i < kLanes; ++i) r[i] = t[i];
  }
}

// xt (Dh, ldt) = rows [0, T) of x (row stride `stride`), transposed: 16 x 16 blocks in
// registers, the rest one element at a time. The next 16 rows are prefetched.
PT_CPU_SIMD_CLONES void transpose_rows(const float* __restrict x, int64_t stride, int64_t T,
                                       int64_t Dh, float* __restrict xt, int64_t ldt) {
  const int64_t T16 = T / kLanes * kLanes, D16 = Dh / kLanes * kLanes;
  for (int64_t j0 = 0; j0 < T16; j0 += kLanes) {
    prefetch_rows(x, stride, j0 + kLanes, std::min(T, j0 + 2 * kLanes), Dh);
    for (int64_t c0 = 0; c0 < D16; c0 += kLanes) {
      Vec16 r[kLanes];
      for (int i = 0; i < kLanes; ++i)
        std::memcpy(&r[i], x + (j0 + i) * stride + c0, sizeof(Vec16));
      transpose16(r);
      for (int i = 0; i < kLanes; ++i) std::memcpy(xt + (c0 + i) * ldt + j0, &r[i], sizeof(Vec16));
    }
    for (int64_t c = D16; c < Dh; ++c)
      for (int64_t j = j0; j < j0 + kLanes; ++j) xt[c * ldt + j] = x[j * stride + c];
  }
  for (int64_t c = 0; c < Dh; ++c)
    for (int64_t j = T16; j < T; ++j) xt[c * ldt + j] = x[j * stride + c];
}

// x (n) . y (n) in float with 16 partial sums in a fixed order (as cpu::sum_f32): a sum in one
// accumulator waits on the add's latency at every element.
inline float dot_f32(const float* __restrict x, const float* __restrict y, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += x[i + j] * y[i + j];
  float s = 0.f;
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  for (; i < n; ++i) s += x[i] * y[i];
  return s;
}

// y (Dh) = s x (Dh).
inline void scale_row(float s, const float* __restrict x, float* __restrict y, int64_t Dh) {
  for (int64_t c = 0; c < Dh; ++c) y[c] = s * x[c];
}

// xp (T, ldp) = rows [0, T) of x; columns Dh .. ldp - 1 of xp are left as they are (zero).
void copy_rows(const float* x, int64_t stride, int64_t T, int64_t Dh, float* xp, int64_t ldp) {
  for (int64_t j = 0; j < T; ++j) std::copy(x + j * stride, x + j * stride + Dh, xp + j * ldp);
}

// Rows of one head as the tiles read or write them (whole vectors of 16): when Dh is a multiple
// of 16 the rows of qkv, dout or dqkv themselves, else copies padded with zeros to Dp columns.
struct Rows {
  const float* p;
  int64_t ld;
};
struct OutRows {
  float* p;
  int64_t ld;
};

Rows padded_rows(const float* x, int64_t stride, int64_t T, int64_t Dh, int64_t Dp, float* pad) {
  if (Dh == Dp) return {x, stride};
  copy_rows(x, stride, T, Dh, pad, Dp);
  return {pad, Dp};
}

// y (Dh) += a x (Dh).
inline void axpy_row(float a, const float* __restrict x, float* __restrict y, int64_t Dh) {
  for (int64_t c = 0; c < Dh; ++c) y[c] += a * x[c];
}

// y (R rows, 16 N) = x (R, ldx) times the key rows of kv for the query rows i0 .. i0 + R - 1,
// each over its keys j <= i0 + r only: the tile runs over the keys all rows see (j <= i0), then
// each row adds its last r keys in order. Keys past a row are never read, so a non-finite value
// in a later position cannot reach it (0 x inf would be NaN).
inline void causal_rows_product(int64_t R, int64_t i0, const float* x, int64_t ldx, Rows kv,
                                int64_t N, OutRows y) {
  tile_product(R, N, i0 + 1, x, ldx, 1, kv.p, kv.ld, y.p, y.ld, false);
  for (int64_t r = 1; r < R; ++r)
    for (int64_t j = i0 + 1; j <= i0 + r; ++j)
      axpy_row(x[r * ldx + j], kv.p + j * kv.ld, y.p + r * y.ld, N * kLanes);
}

// max of x [0, n), n a multiple of 16, with 16 partial maxima (vectorisable, exact).
inline float max_f32(const float* __restrict x, int64_t n) {
  float acc[kLanes];
  for (int j = 0; j < kLanes; ++j) acc[j] = x[j];
  for (int64_t i = kLanes; i < n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
  float m = acc[0];
  for (int j = 1; j < kLanes; ++j) m = acc[j] > m ? acc[j] : m;
  return m;
}

// Sizes of one head's padded buffers: Tp keys (a multiple of 16), Dp columns (likewise).
struct Padded {
  int64_t Tp, Dp;
  Padded(int64_t T, int64_t Dh) : Tp(round_up(T, kLanes)), Dp(round_up(Dh, kLanes)) {}
  int64_t forward_scratch(int64_t Dh) const {
    return Dh * Tp + kTileRows * (Tp + Dp) + (Dh == Dp ? 0 : Tp * Dp);
  }
  int64_t backward_scratch(int64_t Dh) const {
    return 2 * Dh * Tp + 2 * kQueryTile * Tp + Tp + (Dh == Dp ? 0 : 6 * Tp * Dp);
  }
};

// One (b, h) of the forward pass; scratch: Padded::forward_scratch floats, zero on entry to the
// first head (pad columns are never written, so they stay zero).
PT_CPU_SIMD_CLONES void attention_forward_head(const HeadView hv, float* out, int64_t out_stride,
                                               float* lse, int64_t T, int64_t Dh, float scale,
                                               float* scratch) {
  const Padded p(T, Dh);
  float* kt = scratch;              // (Dh, Tp): k transposed, a row of keys per column of q
  float* s = kt + Dh * p.Tp;        // (4, Tp): scores, then probabilities
  float* o = s + kTileRows * p.Tp;  // (4, Dp): unnormalised output rows
  transpose_rows(hv.k, hv.stride, T, Dh, kt, p.Tp);
  const Rows vp = padded_rows(hv.v, hv.stride, T, Dh, p.Dp, o + kTileRows * p.Dp);
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (int64_t i0 = 0; i0 < T; i0 += kTileRows) {
    const int64_t R = std::min<int64_t>(kTileRows, T - i0);
    const int64_t n = i0 + R;                                           // keys 0 .. n - 1 (causal)
    const int64_t nk = round_up(n, kLanes);                             // whole vectors of keys
    prefetch_rows(hv.q, hv.stride, n, std::min(T, n + kTileRows), Dh);  // the next tile's
    tile_product(R, nk / kLanes, Dh, hv.q + i0 * hv.stride, hv.stride, 1, kt, p.Tp, s, p.Tp, false);
    float inv[kTileRows];
    for (int64_t r = 0; r < R; ++r) {
      const int64_t i = i0 + r;
      float* __restrict row = s + r * p.Tp;
      for (int64_t j = 0; j < nk; ++j) row[j] = j <= i ? row[j] * scale : kMasked;
      const float mx = max_f32(row, nk);  // finite: key 0 is never masked
      for (int64_t j = 0; j < nk; ++j) row[j] = cpu::exp_f32(row[j] - mx);  // masked: 0
      const float l = cpu::sum_f32(row, nk);
      lse[i] = mx + std::log(l);
      inv[r] = 1.f / l;
    }
    causal_rows_product(R, i0, s, p.Tp, vp, p.Dp / kLanes, {o, p.Dp});
    for (int64_t r = 0; r < R; ++r) {
      scale_row(inv[r], o + r * p.Dp, out + (i0 + r) * out_stride, Dh);
    }
  }
}

// acc (keys [0, i0 + R), 16 N) += x^T (keys, rows) y (rows, 16 N) over the query rows [i0, i0 +
// R) of one backward step: x (R, ldx) holds p or ds, y the rows of q or dout (from row 0). Each
// key j sums only the rows i >= j that see it: keys below i0 see every row; keys j >= i0 go 4 at
// a time, each first adding its rows above the group's last key one by one, then the rows all 4
// see in a register tile. No row before a key is read, so a non-finite value there cannot reach
// it.
PT_CPU_SIMD_CLONES void accumulate_transposed(int64_t i0, int64_t R, const float* x, int64_t ldx,
                                              Rows y, int64_t N, OutRows acc) {
  if (i0 > 0) tile_product(i0, N, R, x, 1, ldx, y.p + i0 * y.ld, y.ld, acc.p, acc.ld, true);
  for (int64_t j0 = i0; j0 < i0 + R; j0 += kTileRows) {
    const int64_t m = std::min<int64_t>(kTileRows, i0 + R - j0);
    const int64_t last = j0 + m - 1;  // rows >= last see all m keys
    for (int64_t j = j0; j < last; ++j)
      for (int64_t i = j; i < last; ++i)
        axpy_row(x[(i - i0) * ldx + j], y.p + i * y.ld, acc.p + j * acc.ld, N * kLanes);
    tile_product(m, N, i0 + R - last, x + (last - i0) * ldx + j0, 1, ldx, y.p + last * y.ld, y.ld,
                 acc.p + j0 * acc.ld, acc.ld, true);
  }
}

// One (b, h) of the backward pass; dq/dk/dv point into dqkv with the rows of hv.
// scratch: Padded::backward_scratch floats, zero on entry to the first head.
PT_CPU_SIMD_CLONES void attention_backward_head(const HeadView hv, const float* out,
                                                const float* dout, int64_t out_stride,
                                                const float* lse, float* dq, float* dk, float* dv,
                                                int64_t T, int64_t Dh, float scale,
                                                float* scratch) {
  const Padded p(T, Dh);
  const int64_t Tp = p.Tp, Dp = p.Dp, N = Dp / kLanes;
  const bool in_place = Dh == Dp;    // tiles read and write the rows of qkv, dout, dqkv
  float* kt = scratch;               // (Dh, Tp) k transposed: s = q kt
  float* vt = kt + Dh * Tp;          // (Dh, Tp) v transposed: dp = dout vt
  float* pt = vt + Dh * Tp;          // (kQueryTile, Tp) probabilities
  float* ds = pt + kQueryTile * Tp;  // (kQueryTile, Tp) dp, then scale ds
  float* D = ds + kQueryTile * Tp;   // (T)
  float* pad = D + Tp;               // 6 (Tp, Dp) when Dh is not a multiple of 16
  transpose_rows(hv.k, hv.stride, T, Dh, kt, Tp);
  transpose_rows(hv.v, hv.stride, T, Dh, vt, Tp);
  const Rows kp = padded_rows(hv.k, hv.stride, T, Dh, Dp, pad);                 // dq = ds k
  const Rows qp = padded_rows(hv.q, hv.stride, T, Dh, Dp, pad + Tp * Dp);       // dk += ds^T q
  const Rows gp = padded_rows(dout, out_stride, T, Dh, Dp, pad + 2 * Tp * Dp);  // dv += p^T dout
  const OutRows dqa = in_place ? OutRows{dq, hv.stride} : OutRows{pad + 3 * Tp * Dp, Dp};
  const OutRows dka = in_place ? OutRows{dk, hv.stride} : OutRows{pad + 4 * Tp * Dp, Dp};
  const OutRows dva = in_place ? OutRows{dv, hv.stride} : OutRows{pad + 5 * Tp * Dp, Dp};
  for (int64_t i = 0; i < T; ++i) {
    std::fill(dka.p + i * dka.ld, dka.p + i * dka.ld + Dh, 0.f);
    std::fill(dva.p + i * dva.ld, dva.p + i * dva.ld + Dh, 0.f);
  }
  // D_i = dout_i . out_i
  for (int64_t i = 0; i < T; ++i) {
    prefetch_rows(out, out_stride, i + 8, std::min(T, i + 9), Dh);
    prefetch_rows(dout, out_stride, i + 8, std::min(T, i + 9), Dh);
    D[i] = dot_f32(out + i * out_stride, dout + i * out_stride, Dh);
  }
  for (int64_t i0 = 0; i0 < T; i0 += kQueryTile) {
    const int64_t R = std::min(kQueryTile, T - i0);
    // s and dp, 4 rows at a time over the keys those rows see (whole vectors).
    for (int64_t r0 = 0; r0 < R; r0 += kTileRows) {
      const int64_t rows = std::min<int64_t>(kTileRows, R - r0);
      const int64_t nv = round_up(i0 + r0 + rows, kLanes) / kLanes;
      tile_product(rows, nv, Dh, hv.q + (i0 + r0) * hv.stride, hv.stride, 1, kt, Tp, pt + r0 * Tp,
                   Tp, false);
      tile_product(rows, nv, Dh, dout + (i0 + r0) * out_stride, out_stride, 1, vt, Tp, ds + r0 * Tp,
                   Tp, false);
    }
    // p = e^{s - lse}, ds = scale p (dp - D) (the scale of dq and dk); both 0 where masked.
    const int64_t nk = round_up(i0 + R, kLanes);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t i = i0 + r;
      float* __restrict pr = pt + r * Tp;
      float* __restrict dr = ds + r * Tp;
      const float li = lse[i], Di = D[i];
      for (int64_t j = 0; j < nk; ++j) {
        const float pj = cpu::exp_f32(pr[j] * scale - li);
        pr[j] = j <= i ? pj : 0.f;
        dr[j] = j <= i ? scale * (pj * (dr[j] - Di)) : 0.f;
      }
    }
    // dq rows (4 at a time, keys up to their last row), dv += p^T dout, dk += ds^T q.
    for (int64_t r0 = 0; r0 < R; r0 += kTileRows) {
      const int64_t rows = std::min<int64_t>(kTileRows, R - r0);
      causal_rows_product(rows, i0 + r0, ds + r0 * Tp, Tp, kp, N,
                          {dqa.p + (i0 + r0) * dqa.ld, dqa.ld});
    }
    accumulate_transposed(i0, R, pt, Tp, gp, N, dva);
    accumulate_transposed(i0, R, ds, Tp, qp, N, dka);
  }
  if (in_place) return;
  for (int64_t i = 0; i < T; ++i) {
    std::copy(dqa.p + i * Dp, dqa.p + i * Dp + Dh, dq + i * hv.stride);
    std::copy(dka.p + i * Dp, dka.p + i * Dp + Dh, dk + i * hv.stride);
    std::copy(dva.p + i * Dp, dva.p + i * Dp + Dh, dv + i * hv.stride);
  }
}

// Calls body(b, h, scratch) for every (b, h) of B x H, spread over `threads` threads, each with
// its own `scratch_floats` of scratch, zeroed once (the pad columns stay zero: nothing writes
// them). Thread ids come from this function's own parallel region, so the scratch index is right
// even when the caller is itself inside an OpenMP region.
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
  const int64_t work = B * H * T * T * Dh;  // two (T, T, Dh) products, halved by causality
  for_each_head(threads_, B, H, work, Padded(T, Dh).forward_scratch(Dh),
                [=](int64_t b, int64_t h, float* mine) {
                  attention_forward_head(head_view(qkv, b, h, T, H, Dh), out + b * T * d + h * Dh,
                                         d, lse + (b * H + h) * T, T, Dh, scale, mine);
                });
}

void CpuBackend::attention_backward(const float* qkv, const float* out, const float* dout,
                                    const float* lse, float* dqkv, int64_t B, int64_t T, int64_t H,
                                    int64_t Dh, float scale) {
  const int64_t d = H * Dh;
  const int64_t work = 2 * B * H * T * T * Dh;  // five (T, T, Dh) products, halved by causality
  for_each_head(threads_, B, H, work, Padded(T, Dh).backward_scratch(Dh),
                [=](int64_t b, int64_t h, float* mine) {
                  float* dq = dqkv + b * T * 3 * d + h * Dh;  // q, k, v parts d apart
                  const int64_t o = b * T * d + h * Dh;
                  attention_backward_head(head_view(qkv, b, h, T, H, Dh), out + o, dout + o, d,
                                          lse + (b * H + h) * T, dq, dq + d, dq + 2 * d, T, Dh,
                                          scale, mine);
                });
}

}  // namespace pt
