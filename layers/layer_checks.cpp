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
