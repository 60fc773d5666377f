// 2-D convolution on oneDNN primitives with plain NCHW / OIHW memory, cached by (op, shape,
// thread count) as dnnl_primitives.h describes.
#include <array>
#include <memory>
#include <unordered_map>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/core/random.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dnnl_primitives.h"

namespace pt {

namespace {

using cpu::DnnlPrimitive;
using cpu::Scratch;
using cpu::user_scratchpad;
using cpu::wrap_memory;
using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;

enum class ConvOp : int64_t {
  forward,
  forward_bias,
  backward_data,
  backward_weights,
  backward_weights_bias
};

struct ConvKey {
  ConvOp op;
  int64_t threads;
  std::array<int64_t, 13> dims;
  bool operator==(const ConvKey&) const = default;
};

struct ConvKeyHash {
  size_t operator()(const ConvKey& k) const {
    uint64_t h = hash_keys(static_cast<uint64_t>(k.op), static_cast<uint64_t>(k.threads));
    for (int64_t d : k.dims) h = hash_keys(h, static_cast<uint64_t>(d));
    return static_cast<size_t>(h);
  }
};

ConvKey make_key(ConvOp op, int threads, const Conv2dShape& s) {
  return ConvKey{
      op,
      threads,
      {s.N, s.C, s.H, s.W, s.K, s.R, s.S, s.stride_h, s.stride_w, s.pad_h, s.pad_w, s.P, s.Q}};
}

// The memory descriptors of one shape, and the padding oneDNN wants: it takes the right/bottom
// padding explicitly, which is whatever makes the output P x Q (may be below pad_h when the
// stride does not divide evenly; oneDNN accepts pad_r > -stride).
struct ConvDescs {
  memory::desc src, weights, bias, dst;
  memory::dims strides, pad_l, pad_r;
};

ConvDescs make_descs(const Conv2dShape& s) {
  const auto f32 = memory::data_type::f32;
  ConvDescs d;
  d.src = memory::desc({s.N, s.C, s.H, s.W}, f32, memory::format_tag::nchw);
  d.weights = memory::desc({s.K, s.C, s.R, s.S}, f32, memory::format_tag::oihw);
  d.bias = memory::desc({s.K}, f32, memory::format_tag::x);
  d.dst = memory::desc({s.N, s.K, s.P, s.Q}, f32, memory::format_tag::nchw);
  d.strides = {s.stride_h, s.stride_w};
  d.pad_l = {s.pad_h, s.pad_w};
  d.pad_r = {(s.P - 1) * s.stride_h + s.R - s.H - s.pad_h,
             (s.Q - 1) * s.stride_w + s.S - s.W - s.pad_w};
  return d;
}

dnnl::convolution_forward::primitive_desc forward_pd(const ConvDescs& d, bool with_bias) {
  using F = dnnl::convolution_forward;
  const F::desc desc = with_bias
                           ? F::desc(prop_kind::forward_training, algorithm::convolution_direct,
                                     d.src, d.weights, d.bias, d.dst, d.strides, d.pad_l, d.pad_r)
                           : F::desc(prop_kind::forward_training, algorithm::convolution_direct,
                                     d.src, d.weights, d.dst, d.strides, d.pad_l, d.pad_r);
  return F::primitive_desc(desc, user_scratchpad(), cpu::dnnl_engine());
}

std::shared_ptr<const DnnlPrimitive> create(ConvOp op, const Conv2dShape& s) {
  const ConvDescs d = make_descs(s);
  switch (op) {
    case ConvOp::forward:
    case ConvOp::forward_bias:
      return cpu::wrap_primitive<dnnl::convolution_forward::primitive_desc,
                                 dnnl::convolution_forward>(
          forward_pd(d, op == ConvOp::forward_bias));
    case ConvOp::backward_data: {
      using B = dnnl::convolution_backward_data;
      const B::desc desc(algorithm::convolution_direct, d.src, d.weights, d.dst, d.strides, d.pad_l,
                         d.pad_r);
      return cpu::wrap_primitive<B::primitive_desc, B>(
          B::primitive_desc(desc, user_scratchpad(), cpu::dnnl_engine(), forward_pd(d, false)));
    }
    case ConvOp::backward_weights:
    case ConvOp::backward_weights_bias: {
      using B = dnnl::convolution_backward_weights;
      const bool bias = op == ConvOp::backward_weights_bias;
      const B::desc desc = bias ? B::desc(algorithm::convolution_direct, d.src, d.weights, d.bias,
                                          d.dst, d.strides, d.pad_l, d.pad_r)
                                : B::desc(algorithm::convolution_direct, d.src, d.weights, d.dst,
                                          d.strides, d.pad_l, d.pad_r);
      return cpu::wrap_primitive<B::primitive_desc, B>(
          B::primitive_desc(desc, user_scratchpad(), cpu::dnnl_engine(), forward_pd(d, bias)));
    }
  }
  return nullptr;
}

std::string shape_text(const Conv2dShape& s) {
  return fmt::format(
      "x ({}, {}, {}, {}), w ({}, {}, {}, {}), stride ({}, {}), pad ({}, {}), "
      "y ({}, {}, {}, {})",
      s.N, s.C, s.H, s.W, s.K, s.C, s.R, s.S, s.stride_h, s.stride_w, s.pad_h, s.pad_w, s.N, s.K,
      s.P, s.Q);
}

std::shared_ptr<const DnnlPrimitive> lookup(ConvOp op, int threads, const Conv2dShape& s) {
  static cpu::PrimitiveCache<ConvKey, ConvKeyHash> cache;
  return cache.get(
      make_key(op, threads, s), [&] { return create(op, s); }, "conv2d",
      [&] { return shape_text(s); });
}

void check_shape(const Conv2dShape& s) {
  const bool positive = s.N > 0 && s.C > 0 && s.H > 0 && s.W > 0 && s.K > 0 && s.R > 0 && s.S > 0 &&
                        s.stride_h > 0 && s.stride_w > 0 && s.pad_h >= 0 && s.pad_w >= 0;
  if (!positive || s.H + 2 * s.pad_h < s.R || s.W + 2 * s.pad_w < s.S ||
      s.P != (s.H + 2 * s.pad_h - s.R) / s.stride_h + 1 ||
      s.Q != (s.W + 2 * s.pad_w - s.S) / s.stride_w + 1)
    throw ShapeError(fmt::format(
        "conv2d: inconsistent shape {}: sizes must be positive and P = (H + 2 pad_h - R) / "
        "stride_h + 1, Q = (W + 2 pad_w - S) / stride_w + 1",
        shape_text(s)));
}

}  // namespace

// y (N, K, P, Q) = conv(x (N, C, H, W), w (K, C, R, S)) + bias (K).
void CpuBackend::conv2d_forward(const Conv2dShape& s, const float* x, const float* w,
                                const float* bias, float* y) {
  check_shape(s);
  ensure_thread_binding();
  const ConvOp op = bias ? ConvOp::forward_bias : ConvOp::forward;
  const auto cp = lookup(op, threads_, s);
  const ConvDescs d = make_descs(s);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, wrap_memory(d.src, x)},
                                       {DNNL_ARG_WEIGHTS, wrap_memory(d.weights, w)},
                                       {DNNL_ARG_DST, wrap_memory(d.dst, y)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, wrap_memory(d.bias, bias));
  cpu::execute(*this, *cp, std::move(args));
}

// dx (N, C, H, W) = conv_transpose(dy (N, K, P, Q), w); overwrites dx.
void CpuBackend::conv2d_backward_input(const Conv2dShape& s, const float* dy, const float* w,
                                       float* dx) {
  check_shape(s);
  ensure_thread_binding();
  const auto cp = lookup(ConvOp::backward_data, threads_, s);
  const ConvDescs d = make_descs(s);
  cpu::execute(*this, *cp,
               {{DNNL_ARG_DIFF_DST, wrap_memory(d.dst, dy)},
                {DNNL_ARG_WEIGHTS, wrap_memory(d.weights, w)},
                {DNNL_ARG_DIFF_SRC, wrap_memory(d.src, dx)}});
}

// dw (K, C, R, S) += ..., dbias (K) += sum over N, P, Q of dy. oneDNN overwrites its outputs,
// so it writes into scratch memory that is then added.
void CpuBackend::conv2d_backward_weight(const Conv2dShape& s, const float* dy, const float* x,
                                        float* dw, float* dbias) {
  check_shape(s);
  ensure_thread_binding();
  const ConvOp op = dbias ? ConvOp::backward_weights_bias : ConvOp::backward_weights;
  const auto cp = lookup(op, threads_, s);
  const ConvDescs d = make_descs(s);
  const int64_t nw = s.K * s.C * s.R * s.S, nb = dbias ? s.K : 0;
  Scratch tmp(*this, static_cast<size_t>(nw + nb) * sizeof(float));
  float* tmp_w = static_cast<float*>(tmp.get());
  float* tmp_b = tmp_w + nw;
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, wrap_memory(d.src, x)},
                                       {DNNL_ARG_DIFF_DST, wrap_memory(d.dst, dy)},
                                       {DNNL_ARG_DIFF_WEIGHTS, wrap_memory(d.weights, tmp_w)}};
  if (dbias) args.emplace(DNNL_ARG_DIFF_BIAS, wrap_memory(d.bias, tmp_b));
  cpu::execute(*this, *cp, std::move(args));
  axpy(1.f, tmp_w, dw, nw);
  if (dbias) axpy(1.f, tmp_b, dbias, nb);
}

}  // namespace pt
