#include "kernels/cuda/cudnn_attention.h"

#include <fmt/format.h>

#include <bit>
#include <limits>

#include "kernels/cuda/cudnn_graph.h"

namespace pt::cuda {

using cudnn_graph::Dims;
using cudnn_graph::Graph;
using cudnn_graph::Plan;
using cudnn_graph::Uid;

namespace {

constexpr cudnnDataType_t kF32 = CUDNN_DATA_FLOAT;
constexpr cudnnDataType_t kBf16 = CUDNN_DATA_BFLOAT16;

// The value masked scores take: cuDNN before 9.10 wants the lowest float, later ones -inf (as the
// cuDNN frontend's get_negative_inf_value).
float masked_value() {
  return CudnnAttention::version() < 91000 ? std::numeric_limits<float>::lowest()
                                           : -std::numeric_limits<float>::infinity();
}

// Strides of the (b, h, s, d) views, in elements. qkv rows hold [q | k | v] of every head.
struct Views {
  int64_t b, h, s, d;
  Dims bhsd() const { return {b, h, s, d}; }
  Dims bhds() const { return {b, h, d, s}; }
  Dims qkv_strides() const { return {s * 3 * h * d, d, 3 * h * d, 1}; }     // q, k, v
  Dims qkv_transposed() const { return {s * 3 * h * d, d, 1, 3 * h * d}; }  // kᵀ, vᵀ
  Dims out_strides() const { return {s * h * d, d, h * d, 1}; }             // out, dout
  Dims scores() const { return {b, h, s, s}; }
  Dims score_strides() const { return {h * s * s, s * s, s, 1}; }
  Dims score_transposed() const { return {h * s * s, s * s, 1, s}; }
  Dims row() const { return {b, h, s, 1}; }
  Dims row_strides() const { return {h * s, s, 1, 1}; }
};

// Scores where the key is after the query get `masked_value()`: the causal mask as the cuDNN
// frontend writes it (a diagonal band with right bound 0, top-left aligned).
Uid causal_mask(Graph& g, const Views& v, Uid scores) {
  const Uid row = g.tensor(v.scores(), v.score_strides(), CUDNN_DATA_INT32, true);
  const Uid col = g.tensor(v.scores(), v.score_strides(), CUDNN_DATA_INT32, true);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, row, kF32, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, col, kF32, 3);
  const Uid keep = g.tensor(v.scores(), v.score_strides(), CUDNN_DATA_BOOLEAN, true);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, keep, CUDNN_DATA_BOOLEAN);
  const Uid masked = g.tensor(v.scores(), v.score_strides(), kF32, true);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, scores, g.scalar(masked_value()), keep, masked);
  return masked;
}

// Workspace offsets rounded to 256 bytes (cudaMalloc's alignment, more than cuDNN's 16).
int64_t aligned(int64_t bytes) { return (bytes + 255) / 256 * 256; }
int64_t softmax_sum_bytes(int64_t B, int64_t H, int64_t T) {
  return aligned(B * H * T * static_cast<int64_t>(sizeof(float)));
}

Uid virtual_scores(Graph& g, const Views& v) {
  return g.tensor(v.scores(), v.score_strides(), kF32, true);
}

}  // namespace

// A built plan and the uids its execution binds.
struct CudnnAttention::Cached {
  Plan plan;
  AttentionUids ids;
};

CudnnAttention::CudnnAttention(cudaStream_t stream) : stream_(stream) {
  cudnn_graph::check(cudnnCreate(&handle_), "cudnnCreate (attention)");
  try {
    cudnn_graph::check(cudnnSetStream(handle_, stream_), "cudnnSetStream (attention)");
  } catch (...) {
    (void)cudnnDestroy(handle_);
    throw;
  }
}

CudnnAttention::~CudnnAttention() {
  plans_.clear();  // the plans refer to the handle
  if (handle_) (void)cudnnDestroy(handle_);
}

std::string CudnnAttention::unsupported_shape(int64_t Dh) {
  if (Dh % 8 != 0 || Dh > 128)
    return fmt::format(
        "head dimension {} (cuDNN's fused attention needs a multiple of 8, at most "
        "128)",
        Dh);
  return "";
}

size_t CudnnAttention::version() { return cudnnGetVersion(); }

AttentionGraph attention_graph(bool backward, bool deterministic, int64_t B, int64_t T, int64_t H,
                               int64_t Dh, float scale) {
  const Views v{B, H, T, Dh};
  AttentionGraph out;
  Graph& g = out.graph;
  AttentionUids* c = &out.ids;
  c->q = g.tensor(v.bhsd(), v.qkv_strides(), kBf16, false);
  // K (and V in backward) are declared transposed, (b, h, d, s): the matmuls take them so.
  c->k = g.tensor(v.bhds(), v.qkv_transposed(), kBf16, false);
  c->v = backward ? g.tensor(v.bhds(), v.qkv_transposed(), kBf16, false)
                  : g.tensor(v.bhsd(), v.qkv_strides(), kBf16, false);
  c->o = g.tensor(v.bhsd(), v.out_strides(), kBf16, false);
  c->lse = g.tensor(v.row(), v.row_strides(), kF32, false);
  const Uid attn_scale = g.scalar(scale);

  if (!backward) {
    // S = scale · Q Kᵀ, masked; softmax with its statistics; O = P V.
    const Uid s = virtual_scores(g, v);
    g.matmul(c->q, c->k, s);
    const Uid scaled = virtual_scores(g, v);
    g.pointwise(CUDNN_POINTWISE_MUL, s, attn_scale, scaled);
    const Uid masked = causal_mask(g, v, scaled);
    const Uid max = g.tensor(v.row(), v.row_strides(), kF32, true);
    g.reduction(CUDNN_REDUCE_TENSOR_MAX, masked, max);
    const Uid shifted = virtual_scores(g, v);
    g.pointwise(CUDNN_POINTWISE_SUB, masked, max, shifted);
    const Uid exp = virtual_scores(g, v);
    g.pointwise(CUDNN_POINTWISE_EXP, shifted, exp);
    const Uid sum = g.tensor(v.row(), v.row_strides(), kF32, true);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, exp, sum);
    const Uid log_sum = g.tensor(v.row(), v.row_strides(), kF32, true);
    g.pointwise(CUDNN_POINTWISE_LOG, sum, log_sum);
    g.pointwise(CUDNN_POINTWISE_ADD, max, log_sum, c->lse);
    const Uid p = g.tensor(v.scores(), v.score_strides(), kBf16, true);
    g.pointwise(CUDNN_POINTWISE_DIV, exp, sum, p);
    g.matmul(p, c->v, c->o);
  } else {
    c->d_o = g.tensor(v.bhsd(), v.out_strides(), kBf16, false);
    c->dq = g.tensor(v.bhsd(), v.qkv_strides(), kBf16, false);
    c->dk = g.tensor(v.bhsd(), v.qkv_strides(), kBf16, false);
    c->dv = g.tensor(v.bhsd(), v.qkv_strides(), kBf16, false);
    // softmax_sum = rowsum(dO ∘ O) (times the dropout keep-probability, 1 here), in scratch.
    const Uid product = g.tensor(v.bhsd(), {H * T * Dh, T * Dh, H * Dh, 1}, kF32, true);
    g.pointwise(CUDNN_POINTWISE_MUL, c->d_o, c->o, product);
    const Uid row_sum = g.tensor(v.row(), v.row_strides(), kF32, true);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, product, row_sum);
    c->softmax_sum = g.tensor(v.row(), v.row_strides(), kF32, false);
    g.pointwise(CUDNN_POINTWISE_MUL, row_sum, g.scalar(1.f), c->softmax_sum);
    // P = exp(scale · Q Kᵀ − lse), masked.
    const Uid s = virtual_scores(g, v);
    g.matmul(c->q, c->k, s);
    const Uid scaled = virtual_scores(g, v);
    g.pointwise(CUDNN_POINTWISE_MUL, s, attn_scale, scaled);
    const Uid shifted = virtual_scores(g, v);
    g.pointwise(CUDNN_POINTWISE_SUB, scaled, c->lse, shifted);
    const Uid masked = causal_mask(g, v, shifted);
    const Uid p = virtual_scores(g, v);
    g.pointwise(CUDNN_POINTWISE_EXP, masked, p);
    // dV = Pᵀ dO.
    const Uid p_t = g.tensor(v.scores(), v.score_transposed(), kBf16, true);
    g.reshape(p, p_t);
    g.matmul(p_t, c->d_o, c->dv);
    // dS = scale · P ∘ (dO Vᵀ − softmax_sum).
    const Uid dp = virtual_scores(g, v);
    g.matmul(c->d_o, c->v, dp);
    const Uid centred = virtual_scores(g, v);
    g.pointwise(CUDNN_POINTWISE_SUB, dp, c->softmax_sum, centred);
    const Uid ds_unscaled = virtual_scores(g, v);
    g.pointwise(CUDNN_POINTWISE_MUL, centred, p, ds_unscaled);
    const Uid ds = virtual_scores(g, v);
    g.pointwise(CUDNN_POINTWISE_MUL, ds_unscaled, attn_scale, ds);
    // dK = dSᵀ Q.
    const Uid ds_t = g.tensor(v.scores(), v.score_transposed(), kBf16, true);
    g.reshape(ds, ds_t);
    g.matmul(ds_t, c->q, c->dk);
    // dQ = dS K, through an fp32 accumulator unless deterministic. K is viewed back as
    // (b, h, s, d). The view is typed fp32 as in the cuDNN frontend's graph, where a virtual
    // tensor nobody types takes the graph's intermediate type (llm.c: fp32) and its reshape
    // node keeps it; the engine reads K's bf16 memory through it.
    const Uid k_view = g.tensor(v.bhsd(), v.qkv_strides(), kF32, true);
    g.reshape(c->k, k_view);
    if (deterministic) {
      g.matmul(ds, k_view, c->dq);
    } else {
      c->dq_accumulator = g.tensor(v.bhsd(), {H * T * Dh, T * Dh, Dh, 1}, kF32, false);
      g.matmul(ds, k_view, c->dq_accumulator);
      g.pointwise(CUDNN_POINTWISE_IDENTITY, c->dq_accumulator, c->dq);
    }
    c->scratch_bytes = softmax_sum_bytes(B, H, T) +
                       (deterministic ? 0 : B * H * T * Dh * static_cast<int64_t>(sizeof(float)));
  }
  return out;
}

CudnnAttention::Cached& CudnnAttention::plan(const Key& key) {
  if (auto it = plans_.find(key); it != plans_.end()) return *it->second;
  const auto [backward, deterministic, B, T, H, Dh, scale_bits] = key;
  AttentionGraph built =
      attention_graph(backward, deterministic, B, T, H, Dh, std::bit_cast<float>(scale_bits));
  auto c = std::make_unique<Cached>();
  c->plan = built.graph.build(handle_, backward && deterministic);
  c->ids = built.ids;
  return *plans_.emplace(key, std::move(c)).first->second;
}

namespace {
uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }
}  // namespace

void CudnnAttention::forward(const uint16_t* qkv, uint16_t* out, float* lse, int64_t B, int64_t T,
                             int64_t H, int64_t Dh, float scale, const WorkspaceFn& workspace) {
  if (B * T * H == 0) return;
  Cached& c = plan({false, false, B, T, H, Dh, bits(scale)});
  auto* base = const_cast<uint16_t*>(qkv);
  void* ws =
      c.plan.workspace_bytes > 0 ? workspace(static_cast<size_t>(c.plan.workspace_bytes)) : nullptr;
  Graph::execute(handle_, c.plan,
                 {{c.ids.q, base},
                  {c.ids.k, base + H * Dh},
                  {c.ids.v, base + 2 * H * Dh},
                  {c.ids.o, out},
                  {c.ids.lse, lse}},
                 ws);
}

void CudnnAttention::backward(const uint16_t* qkv, const uint16_t* out, const uint16_t* dout,
                              const float* lse, uint16_t* dqkv, int64_t B, int64_t T, int64_t H,
                              int64_t Dh, float scale, bool deterministic,
                              const WorkspaceFn& workspace) {
  if (B * T * H == 0) return;
  Cached& c = plan({true, deterministic, B, T, H, Dh, bits(scale)});
  auto* base = const_cast<uint16_t*>(qkv);
  const int64_t plan_bytes = aligned(c.plan.workspace_bytes);
  auto* ws = static_cast<char*>(workspace(static_cast<size_t>(plan_bytes + c.ids.scratch_bytes)));
  auto* softmax_sum = reinterpret_cast<float*>(ws + plan_bytes);
  std::map<Uid, void*> pointers{{c.ids.q, base},
                                {c.ids.k, base + H * Dh},
                                {c.ids.v, base + 2 * H * Dh},
                                {c.ids.o, const_cast<uint16_t*>(out)},
                                {c.ids.d_o, const_cast<uint16_t*>(dout)},
                                {c.ids.lse, const_cast<float*>(lse)},
                                {c.ids.dq, dqkv},
                                {c.ids.dk, dqkv + H * Dh},
                                {c.ids.dv, dqkv + 2 * H * Dh},
                                {c.ids.softmax_sum, softmax_sum}};
  if (c.ids.dq_accumulator != 0) {
    // cuDNN 9.6 and later clear the accumulator themselves; earlier ones need it zero. Clearing
    // costs one pass over B·H·T·Dh floats either way.
    auto* accumulator = reinterpret_cast<float*>(ws + plan_bytes + softmax_sum_bytes(B, H, T));
    if (cudaMemsetAsync(accumulator, 0, static_cast<size_t>(B * H * T * Dh) * sizeof(float),
                        stream_) != cudaSuccess)
      throw cudnn_graph::Refused("cudaMemsetAsync of the attention dQ accumulator failed");
    pointers[c.ids.dq_accumulator] = accumulator;
  }
  Graph::execute(handle_, c.plan, pointers, ws);
}

}  // namespace pt::cuda
