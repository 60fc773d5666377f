#include "engine/data/batching.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include "engine/core/error.h"
#include "engine/core/random.h"

namespace pt {

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  if (n < 0) throw UsageError(fmt::format("epoch_order: negative sample count {}", n));
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!shuffle) return order;
  CounterRng rng(hash_keys(seed, static_cast<uint64_t>(epoch)));
  // Fisher-Yates from the back: position i takes a uniform pick of the i + 1 not yet placed.
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.next_below(static_cast<uint64_t>(i) + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

std::vector<int64_t> split_sizes(int64_t total, int64_t parts) {
  if (parts < 1)
    throw UsageError(
        fmt::format("cannot split a batch of {} samples into {} micro-batches: "
                    "--microbatches must be at least 1",
                    total, parts));
  if (parts > total)
    throw UsageError(
        fmt::format("cannot split a batch of {} samples into {} micro-batches: use "
                    "--microbatches <= {} or a larger --batch",
                    total, parts, total));
  std::vector<int64_t> sizes(static_cast<size_t>(parts), total / parts);
  for (int64_t i = 0; i < total % parts; ++i) ++sizes[static_cast<size_t>(i)];
  return sizes;
}

Batch gather_batch(const Dataset& data, std::span<const int64_t> indices) {
  const int64_t b = static_cast<int64_t>(indices.size());
  const auto numel = static_cast<size_t>(data.sample_numel());
  Batch out;
  out.size = b;
  out.input_shape = data.sample_shape.with_batch(b);
  out.inputs.resize(static_cast<size_t>(b) * numel);
  out.labels.resize(static_cast<size_t>(b));
  for (size_t k = 0; k < indices.size(); ++k) {
    const int64_t i = indices[k];
    if (i < 0 || i >= data.size())
      throw UsageError(
          fmt::format("gather_batch: sample index {} outside the dataset of {}", i, data.size()));
    const auto u = static_cast<size_t>(i);
    if (numel != 0)
      std::memcpy(out.inputs.data() + k * numel, data.inputs.data() + u * numel,
                  numel * sizeof(float));
    out.labels[k] = data.labels[u];
  }
  return out;
}

// ---- BatchIterator
// --------------------------------------------------------------------------------

BatchIterator::BatchIterator(const Dataset& data, BatchOptions options)
    : data_(&data), options_(options) {
  if (options_.batch_size < 1)
    throw UsageError(fmt::format("batch size must be at least 1, got {}", options_.batch_size));
  if (data.size() == 0) throw UsageError("cannot iterate over an empty dataset");
  if (static_cast<int64_t>(data.inputs.size()) != data.size() * data.sample_numel())
    throw UsageError(fmt::format("dataset holds {} input values for {} samples of shape {}",
                                 data.inputs.size(), data.size(), data.sample_shape.str()));
  if (options_.drop_last && data.size() < options_.batch_size)
    throw UsageError(
        fmt::format("a dataset of {} samples has no full batch of {}: use a smaller "
                    "--batch or keep the last partial batch",
                    data.size(), options_.batch_size));
}

int64_t BatchIterator::epoch_samples() const {
  const int64_t n = data_->size();
  return options_.drop_last ? n - n % options_.batch_size : n;
}

int64_t BatchIterator::batches_per_epoch() const {
  const int64_t n = data_->size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

const std::vector<int64_t>& BatchIterator::order_for(int64_t epoch) {
  if (epoch != order_epoch_) {
    order_ = epoch_order(data_->size(), options_.seed, epoch, options_.shuffle);
    order_epoch_ = epoch;
  }
  return order_;
}

void BatchIterator::set_position(BatchPosition pos) {
  if (pos.epoch < 0 || pos.offset < 0 || pos.offset > data_->size())
    throw UsageError(
        fmt::format("batch position (epoch {}, offset {}) is outside a dataset of {} "
                    "samples: the checkpoint belongs to another dataset",
                    pos.epoch, pos.offset, data_->size()));
  pos_ = pos;
}

Batch BatchIterator::next() {
  const int64_t limit = epoch_samples();
  // A restored offset may sit where no batch fits (end of epoch; drop_last with < B left).
  if (limit - pos_.offset <= 0 || (options_.drop_last && limit - pos_.offset < options_.batch_size))
    pos_ = {pos_.epoch + 1, 0};
  const std::vector<int64_t>& order = order_for(pos_.epoch);
  const int64_t take = std::min(options_.batch_size, limit - pos_.offset);
  Batch batch = gather_batch(*data_, std::span(order).subspan(static_cast<size_t>(pos_.offset),
                                                              static_cast<size_t>(take)));
  pos_.offset += take;
  if (pos_.offset >= limit || (options_.drop_last && limit - pos_.offset < options_.batch_size))
    pos_ = {pos_.epoch + 1, 0};
  return batch;
}

}  // namespace pt
