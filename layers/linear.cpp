#include "layers/linear.h"

#include <cmath>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "layers/layer_checks.h"
#include "layers/tensor_parallel/mappings.h"
#include "layers/tensor_parallel/parallel_linear.h"

namespace pt {

namespace {
// A per-sample input of rank >= 2 is a sequence (T, ..., in): forward also takes T' < T.
constexpr int kSequenceRank = 2;
}  // namespace

Linear::Linear(Shape in, int64_t out_features, bool bias)
    : Layer(std::string(kKind), in), out_(out_features), bias_(bias) {
  if (in.rank() == 0)
    throw ShapeError(fmt::format("linear: expects input (..., in_features) but got {}", in.str()));
  in_ = in.back();
  require_positive(kKind, "in_features (the input's last dimension)", in_);
  require_positive(kKind, "input size", in.numel());
  require_positive(kKind, "out_features", out_);
  output_shape_ = in;
  output_shape_[in.rank() - 1] = out_;
}

void Linear::check_in_features(const Shape& in, int64_t in_features) {
  if (in.rank() > 0 && in.back() == in_features) return;
  std::string hint;
  if (in.rank() >= 2 && in.numel() == in_features) hint = "; add .flatten() before it";
  throw ShapeError(
      fmt::format("linear: expects input (..., {}) but got {}{}", in_features, in.str(), hint));
}

std::vector<ParamSpec> Linear::param_specs() const {
  const float bound = 1.f / std::sqrt(static_cast<float>(in_));
  std::vector<ParamSpec> specs{{"weight", Shape{out_, in_}, ParamInit::uniform(bound)}};
  if (bias_) specs.push_back({"bias", Shape{out_}, ParamInit::uniform(bound)});
  return specs;
}

LayerCost Linear::cost() const {
  const double gemm = 2.0 * static_cast<double>(input_shape_.rows() * in_ * out_);
  LayerCost c;
  c.forward_flops = gemm;                         // x W^T (the bias add is not counted)
  c.backward_input_flops = gemm;                  // dy W
  c.backward_weight_flops = gemm;                 // dy^T x (the bias row sum is not counted)
  c.activation_bytes = input_shape_.numel() * 4;  // x
  return c;
}

std::unique_ptr<Layer> Linear::shard_for(const TensorParallel& tp, ActivationSplit input) const {
  const bool input_split = input.features;
  std::unique_ptr<Layer> shard;
  switch (style_) {
    case ParallelStyle::column:
    case ParallelStyle::vocab: {
      if (input_split)
        throw ShapeError(
            fmt::format("layer '{}' (linear) is declared column-parallel but follows another "
                        "column-parallel layer; declare it row-parallel to close the pair",
                        name_));
      // On a chunk of the sequence (after a sequence-parallel block) it gathers the sequence;
      // otherwise its input is whole and it is the plain column-parallel layer.
      TensorParallel column = tp;
      column.sequence_parallel = input.sequence;
      Shape in = input_shape_;
      if (input.sequence) {
        if (in.rank() < 2)
          throw ShapeError(fmt::format(
              "layer '{}' (linear): its input is split along the sequence but {} is not a "
              "sequence (T, ..., in_features)",
              name_, in.str()));
        in[0] = context_chunk(tp, in[0], fmt::format("layer '{}' (linear)", name_));
      }
      shard = std::make_unique<ColumnParallelLinear>(in, out_, bias_, column);
      break;
    }
    case ParallelStyle::row: {
      if (input.sequence)
        throw ShapeError(fmt::format(
            "layer '{}' (linear) is declared row-parallel but its input is split along the "
            "sequence; a row-parallel linear follows a column-parallel one",
            name_));
      if (!input_split)
        throw ShapeError(fmt::format(
            "layer '{}' (linear) is declared row-parallel but its input is whole on every rank; "
            "a row-parallel linear follows a column-parallel one",
            name_));
      // input_shape_ here is the whole layer's; the shard takes the slice.
      Shape slice = input_shape_;
      if (in_ % tp.size != 0)
        throw ShapeError(fmt::format(
            "layer '{}' (linear): in_features {} does not split across {} tensor-parallel "
            "ranks; choose --tp dividing {}",
            name_, in_, tp.size, in_));
      slice[slice.rank() - 1] = in_ / tp.size;
      TensorParallel row = tp;
      row.sequence_parallel = false;  // its output is whole (only a block scatters it)
      shard = std::make_unique<RowParallelLinear>(slice, in_, out_, bias_, row);
      break;
    }
    case ParallelStyle::replicated: return Layer::shard_for(tp, input);
  }
  shard->set_name(name_);
  return shard;
}

// ---- forward -------------------------------------------------------------------------------
// On a sequence (T, in) the layer also accepts a shorter T' (check_batched_sequence); rows count
// what came: rows = B * T'.
Tensor Linear::forward(const Tensor& x, LayerContext& ctx) {
  Tensor y = product(x, ctx);
  if (ctx.info().training) ctx.save(x);
  return y;
}

Tensor Linear::product(const Tensor& x, LayerContext& ctx) const {
  const Shape xs = check_batched_sequence(*this, "input", x, input_shape_, kSequenceRank);
  require_bound(*this);
  Backend& be = ctx.backend();
  const int64_t rows = xs.rows();
  Shape ys = xs;
  ys[ys.rank() - 1] = out_;
  Tensor y = ctx.alloc(ys);
  // y (rows, out) = x (rows, in) W^T (in, out)
  if (bias_)
    be.gemm_bias(false, true, rows, out_, in_, x.f32(), in_, params_[0].f32(), in_,
                 params_[1].f32(), y.f32(), out_);
  else
    be.gemm(false, true, rows, out_, in_, 1.f, x.f32(), in_, params_[0].f32(), in_, 0.f, y.f32(),
            out_);
  return y;
}

// ---- backward ------------------------------------------------------------------------------
Tensor Linear::backward_input(const Tensor& dy, LayerContext& ctx) {
  const Shape dys = check_batched_sequence(*this, "gradient", dy, output_shape_, kSequenceRank);
  require_bound(*this);
  const int64_t rows = dys.rows();
  Shape dxs = dys;
  dxs[dxs.rank() - 1] = in_;
  Tensor dx = ctx.alloc(dxs);
  // dx (rows, in) = dy (rows, out) W (out, in)
  ctx.backend().gemm(false, false, rows, in_, out_, 1.f, dy.f32(), out_, params_[0].f32(), in_, 0.f,
                     dx.f32(), in_);
  return dx;
}

void Linear::backward_weight(const Tensor& dy, LayerContext& ctx) {
  weight_gradient(dy, saved_or_throw(*this, ctx, 0), ctx);
}

void Linear::weight_gradient(const Tensor& dy, const Tensor& x, LayerContext& ctx) {
  const Shape dys = check_batched_sequence(*this, "gradient", dy, output_shape_, kSequenceRank);
  require_bound(*this);
  require_same_rows(*this, dys, x.shape());
  Backend& be = ctx.backend();
  const int64_t rows = dys.rows();
  // dW (out, in) += dy^T (out, rows) x (rows, in); = when nothing was written yet (no pass
  // zeroes dW first: the GEMM's beta 0 also saves reading it)
  const bool unwritten = ctx.gradients_unwritten();
  be.gemm(true, false, out_, in_, rows, 1.f, dy.f32(), out_, x.f32(), in_, unwritten ? 0.f : 1.f,
          grads_[0].f32(), in_);
  // db (out) += sum over rows of dy (rows, out)
  if (bias_) {
    if (unwritten) be.fill(grads_[1].f32(), 0.f, out_);
    be.sum_rows_accumulate(dy.f32(), grads_[1].f32(), rows, out_);
  }
}

}  // namespace pt
