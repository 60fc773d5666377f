#include "layers/layer_checks.h"

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

std::string batched_str(const Shape& per_sample) {
  std::string s = per_sample.str();  // "(784)" or "()"
  return per_sample.rank() == 0 ? "(B)" : "(B, " + s.substr(1);
}

std::string layer_label(const Layer& layer) {
  if (layer.name() == layer.kind()) return std::string(layer.kind());
  return fmt::format("{} '{}'", layer.kind(), layer.name());
}

void require_positive(std::string_view kind, std::string_view what, int64_t value) {
  if (value <= 0)
    throw ShapeError(fmt::format("{}: {} must be positive but got {}", kind, what, value));
}

void require_rank(std::string_view kind, const Shape& in, int rank, std::string_view want) {
  if (in.rank() != rank)
    throw ShapeError(fmt::format("{}: expects input {} but got {}", kind, want, in.str()));
}

int64_t check_batched(const Layer& layer, std::string_view what, const Tensor& x,
                      const Shape& per_sample, DType dtype) {
  if (!x.defined() && x.numel() != 0)
    throw UsageError(fmt::format("{}: {} tensor is undefined", layer_label(layer), what));
  if (x.shape().rank() != per_sample.rank() + 1 || x.shape().drop_first() != per_sample)
    throw ShapeError(fmt::format("{}: expects {} {} but got {}", layer_label(layer), what,
                                 batched_str(per_sample), x.shape().str()));
  if (x.dtype() != dtype)
    throw ShapeError(fmt::format("{}: expects {} of type {} but got {}", layer_label(layer), what,
                                 dtype_name(dtype), dtype_name(x.dtype())));
  return x.shape()[0];
}

Shape check_batched_sequence(const Layer& layer, std::string_view what, const Tensor& x,
                             const Shape& per_sample, int sequence_rank, DType dtype) {
  if (per_sample.rank() < sequence_rank || per_sample.rank() == 0) {
    check_batched(layer, what, x, per_sample, dtype);
    return x.shape();
  }
  if (!x.defined() && x.numel() != 0)
    throw UsageError(fmt::format("{}: {} tensor is undefined", layer_label(layer), what));
  const Shape& s = x.shape();
  // (B, T', ...rest): everything but T' must be what the layer was built for.
  Shape rest;
  for (int i = 2; i < s.rank(); ++i) rest.push_back(s[i]);
  Shape want_rest;
  for (int i = 1; i < per_sample.rank(); ++i) want_rest.push_back(per_sample[i]);
  const int64_t T = per_sample[0];
  if (s.rank() != per_sample.rank() + 1 || rest != want_rest || s[1] < 1 || s[1] > T) {
    std::string want = "(B, T'";
    for (int64_t d : want_rest) want += fmt::format(", {}", d);
    throw ShapeError(
        fmt::format("{}: expects {} {}) with 1 <= T' <= {} (the sequence length it was "
                    "built for) but got {}",
                    layer_label(layer), what, want, T, s.str()));
  }
  if (x.dtype() != dtype)
    throw ShapeError(fmt::format("{}: expects {} of type {} but got {}", layer_label(layer), what,
                                 dtype_name(dtype), dtype_name(x.dtype())));
  return s;
}

void require_same_rows(const Layer& layer, const Shape& gradient, const Shape& forward_input) {
  if (gradient.rows() != forward_input.rows())
    throw ShapeError(
        fmt::format("{}: the gradient is {} but forward ran on {}; backward needs the "
                    "gradient of that same forward",
                    layer_label(layer), gradient.str(), forward_input.str()));
}

void require_bound(const Layer& layer) {
  if (layer.params().empty())
    throw UsageError(fmt::format("{}: parameters are not bound; call bind() before forward",
                                 layer_label(layer)));
}

const Tensor& saved_or_throw(const Layer& layer, const LayerContext& ctx, size_t i) {
  if (i >= ctx.saved_count())
    throw UsageError(fmt::format(
        "{}: backward found nothing saved by forward (was forward run in evaluation mode, or the "
        "context cleared before backward?)",
        layer_label(layer)));
  return ctx.saved(i);
}

}  // namespace pt
