#include "layers/tensor_parallel/mappings.h"

#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

int64_t split_size(const TensorParallel& tp, int64_t whole, std::string_view layer,
                   std::string_view what) {
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size)
    throw ShapeError(
        fmt::format("{}: tensor-parallel rank {} of {} is not a rank", layer, tp.rank, tp.size));
  if (tp.enabled() && !tp.group)
    throw ShapeError(fmt::format("{}: tensor-parallel size {} needs a group", layer, tp.size));
  if (whole % tp.size != 0)
    throw ShapeError(fmt::format(
        "{}: {} ({}) does not split across {} tensor-parallel ranks; choose --tp dividing {}",
        layer, what, whole, tp.size, whole));
  return whole / tp.size;
}

VocabRange vocab_range(int64_t vocab, const TensorParallel& tp, std::string_view what) {
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size)
    throw UsageError(
        fmt::format("{}: tensor-parallel rank {} of {} does not exist", what, tp.rank, tp.size));
  if (tp.enabled() && tp.group == nullptr)
    throw UsageError(
        fmt::format("{}: built for {} tensor-parallel ranks without a group", what, tp.size));
  if (vocab % tp.size != 0)
    throw ShapeError(fmt::format(
        "{}: the vocabulary of {} tokens does not split into {} equal tensor-parallel slices "
        "({} % {} = {}); choose --tp dividing the vocabulary, or pad the vocabulary to a "
        "multiple of {}",
        what, vocab, tp.size, vocab, tp.size, vocab % tp.size, tp.size));
  const int64_t count = vocab / tp.size;
  return VocabRange{tp.rank * count, count, vocab};
}

PendingTensor::PendingTensor(std::unique_ptr<PendingCollective> collective,
                             std::function<Tensor()> finish)
    : collective_(std::move(collective)), finish_(std::move(finish)) {}

PendingTensor::~PendingTensor() {
  if (!collective_) return;
  try {
    collective_->wait();
  } catch (...) {  // already unwinding from the error that abandoned it, or reported by a peer
  }
}

Tensor PendingTensor::wait() {
  if (!finish_) throw std::logic_error("PendingTensor::wait: nothing started, or waited already");
  if (collective_) {
    auto collective = std::move(collective_);
    collective->wait();
  }
  auto finish = std::move(finish_);
  finish_ = nullptr;
  return finish();
}

PendingTensor start_all_reduce_input_gradient(const TensorParallel& tp, Backend& backend,
                                              const Tensor& dx, std::string_view what) {
  if (!tp.enabled()) return PendingTensor(nullptr, [dx] { return dx; });
  return PendingTensor(tp.group->start_all_reduce_sum(backend, dx.f32(), dx.numel(), what),
                       [dx] { return dx; });
}

// ---- sequence parallelism -------------------------------------------------------------------
namespace {

// (B, T', rest...) with T' = T * chunk: B, chunk and the floats per token.
struct SequenceBlocks {
  int64_t B, chunk, token;
};

SequenceBlocks blocks_of(const Shape& s, int64_t chunk) {
  int64_t token = 1;
  for (int i = 2; i < s.rank(); ++i) token *= s[i];
  return {s[0], chunk, token};
}

void require_sequence(const Tensor& x, std::string_view what) {
  if (x.shape().rank() < 2 || x.dtype() != DType::f32)
    throw ShapeError(
        fmt::format("{}: expects a sequence (B, T, ...) of f32 but got {}", what, x.shape().str()));
}

// Between (B, T', ...) and the group's layout (T, B, T'/T, ...): rank block t of sample b.
// to_ranks: whole -> blocks; else blocks -> whole.
void reorder(Backend& be, const SequenceBlocks& k, int ranks, const float* from, float* to,
             bool to_ranks) {
  const int64_t block = k.chunk * k.token;
  const size_t bytes = static_cast<size_t>(block) * sizeof(float);
  for (int t = 0; t < ranks; ++t)
    for (int64_t b = 0; b < k.B; ++b) {
      const int64_t whole_at = (b * ranks + t) * block, ranks_at = (t * k.B + b) * block;
      if (to_ranks)
        be.copy_within(to + ranks_at, from + whole_at, bytes);
      else
        be.copy_within(to + whole_at, from + ranks_at, bytes);
    }
}

}  // namespace

int64_t sequence_chunk(const TensorParallel& tp, int64_t sequence, std::string_view layer) {
  if (sequence % tp.size != 0)
    throw ShapeError(fmt::format(
        "{}: sequence parallelism splits the sequence across the {} tensor-parallel ranks, but "
        "this micro-batch's sequence length T' = {} does not divide by --tp {}; use sequences "
        "of a multiple of {} tokens, or --sequence-parallel off",
        layer, tp.size, sequence, tp.size, tp.size));
  return sequence / tp.size;
}

int64_t context_chunk(const TensorParallel& tp, int64_t context, std::string_view layer) {
  if (context % tp.size != 0)
    throw ShapeError(fmt::format(
        "{}: sequence parallelism splits the sequence across the {} tensor-parallel ranks, but "
        "the context it is built for ({} tokens) does not divide by --tp {}; choose a context "
        "that is a multiple of {}, or --sequence-parallel off",
        layer, tp.size, context, tp.size, tp.size));
  return context / tp.size;
}

namespace {

// How a collective below runs: started on the group (waited for later), or blocking, here (a
// blocking call does not pass through the group's thread: no hand-over on the hot path).
enum class Run { started, blocking };

std::unique_ptr<PendingCollective> all_gather_as(Run run, const TensorParallel& tp,
                                                 Backend& backend, const float* in, float* out,
                                                 int64_t n, std::string_view what) {
  if (run == Run::started) return tp.group->start_all_gather(backend, in, out, n, what);
  tp.group->all_gather(backend, in, out, n, what);
  return std::make_unique<CompletedCollective>();
}

std::unique_ptr<PendingCollective> reduce_scatter_as(Run run, const TensorParallel& tp,
                                                     Backend& backend, const float* in, float* out,
                                                     int64_t n, std::string_view what) {
  if (run == Run::started) return tp.group->start_reduce_scatter_sum(backend, in, out, n, what);
  tp.group->reduce_scatter_sum(backend, in, out, n, what);
  return std::make_unique<CompletedCollective>();
}

PendingTensor gather_sequence_as(Run run, const TensorParallel& tp, Backend& backend,
                                 const Tensor& x, std::string_view what) {
  require_sequence(x, what);
  Shape whole = x.shape();
  whole[1] *= tp.size;
  Tensor out = backend.empty(whole);
  const SequenceBlocks k = blocks_of(x.shape(), x.shape()[1]);
  if (k.B == 1)  // (T, 1, T'/T, ...) is (1, T', ...)
    return PendingTensor(all_gather_as(run, tp, backend, x.f32(), out.f32(), x.numel(), what),
                         [x, out] { return out; });
  Tensor ranks = backend.empty(Shape{whole.numel()});
  auto gathered = all_gather_as(run, tp, backend, x.f32(), ranks.f32(), x.numel(), what);
  return PendingTensor(std::move(gathered), [x, ranks, out, k, T = tp.size, &backend] {
    reorder(backend, k, T, ranks.f32(), out.f32(), /*to_ranks=*/false);
    return out;
  });
}

PendingTensor reduce_scatter_sequence_as(Run run, const TensorParallel& tp, Backend& backend,
                                         const Tensor& y, std::string_view what) {
  require_sequence(y, what);
  Shape part = y.shape();
  part[1] = sequence_chunk(tp, part[1], what);
  Tensor out = backend.empty(part);
  const SequenceBlocks k = blocks_of(y.shape(), part[1]);
  if (k.B == 1)
    return PendingTensor(reduce_scatter_as(run, tp, backend, y.f32(), out.f32(), out.numel(), what),
                         [y, out] { return out; });
  Tensor ranks = backend.empty(Shape{y.numel()});
  reorder(backend, k, tp.size, y.f32(), ranks.f32(), /*to_ranks=*/true);
  return PendingTensor(
      reduce_scatter_as(run, tp, backend, ranks.f32(), out.f32(), out.numel(), what),
      [ranks, out] { return out; });
}

}  // namespace

PendingTensor start_gather_sequence(const TensorParallel& tp, Backend& backend, const Tensor& x,
                                    std::string_view what) {
  return gather_sequence_as(Run::started, tp, backend, x, what);
}

PendingTensor start_reduce_scatter_sequence(const TensorParallel& tp, Backend& backend,
                                            const Tensor& y, std::string_view what) {
  return reduce_scatter_sequence_as(Run::started, tp, backend, y, what);
}

Tensor gather_sequence(const TensorParallel& tp, Backend& backend, const Tensor& x,
                       std::string_view what) {
  return gather_sequence_as(Run::blocking, tp, backend, x, what).wait();
}

Tensor reduce_scatter_sequence(const TensorParallel& tp, Backend& backend, const Tensor& y,
                               std::string_view what) {
  return reduce_scatter_sequence_as(Run::blocking, tp, backend, y, what).wait();
}

Tensor scatter_sequence(const TensorParallel& tp, Backend& backend, const Tensor& x,
                        std::string_view layer) {
  require_sequence(x, layer);
  Shape part = x.shape();
  part[1] = sequence_chunk(tp, part[1], layer);
  Tensor out = backend.empty(part);
  const SequenceBlocks k = blocks_of(x.shape(), part[1]);
  const int64_t block = k.chunk * k.token;
  for (int64_t b = 0; b < k.B; ++b)
    backend.copy_within(out.f32() + b * block, x.f32() + (b * tp.size + tp.rank) * block,
                        static_cast<size_t>(block) * sizeof(float));
  return out;
}

}  // namespace pt
