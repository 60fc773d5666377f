#pragma once
// From a Dataset to batches: the per-epoch sample order, the split of a batch of B samples
// into M micro-batches, and an iterator whose position can be saved in a checkpoint and
// restored to continue with exactly the batch that would have come next.
//
// Everything is a pure function of (seed, epoch, position): the same run resumed, or run with
// another partition or replica count, sees the same samples in the same order.
#include <cstdint>
#include <span>
#include <vector>

#include "engine/core/shape.h"
#include "engine/data/dataset.h"

namespace pt {

// The order in which an epoch visits samples 0..n-1: a Fisher-Yates shuffle driven by
// CounterRng(hash_keys(seed, epoch)), or 0, 1, ..., n-1 when !shuffle. Throws UsageError if n < 0.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle);

// Sizes of `parts` micro-batches of a batch of `total` samples: they differ by at most one,
// larger first (10 into 4 -> 3, 3, 2, 2). Throws UsageError unless 1 <= parts <= total.
std::vector<int64_t> split_sizes(int64_t total, int64_t parts);

struct Batch {
  int64_t size = 0;             // B
  Shape input_shape;            // (B, ...sample_shape)
  std::vector<float> inputs;    // (B, ...sample_shape), row-major
  std::vector<int32_t> labels;  // (B)
};

// The samples at `indices`, in that order. Throws UsageError for an index outside the dataset.
Batch gather_batch(const Dataset& data, std::span<const int64_t> indices);

// Where an iterator stands: the next batch starts at sample `offset` of epoch `epoch`'s order.
struct BatchPosition {
  int64_t epoch = 0;
  int64_t offset = 0;  // samples of this epoch already returned
  bool operator==(const BatchPosition&) const = default;
};

struct BatchOptions {
  int64_t batch_size = 1;  // B
  bool shuffle = true;
  bool drop_last = false;  // false: an epoch ends with a smaller batch when B does not divide N
  uint64_t seed = 0;
};

// Endless batches over a dataset, epoch after epoch. The dataset must outlive the iterator.
class BatchIterator {
 public:
  // Throws UsageError for B < 1, an empty dataset, or drop_last with N < B (no batch at all).
  BatchIterator(const Dataset& data, BatchOptions options);

  // The batch at position(), then advances; after an epoch's last batch the position is
  // (epoch + 1, 0).
  Batch next();

  BatchPosition position() const { return pos_; }
  // Continue from a saved position (throws UsageError if it is outside an epoch). A position
  // saved with another batch size still means "this many samples of this epoch are done".
  void set_position(BatchPosition pos);

  // N / B rounded down with drop_last, up without.
  int64_t batches_per_epoch() const;
  const BatchOptions& options() const { return options_; }

 private:
  // Samples an epoch hands out: N, or N rounded down to a multiple of B with drop_last.
  int64_t epoch_samples() const;
  const std::vector<int64_t>& order_for(int64_t epoch);

  const Dataset* data_;
  BatchOptions options_;
  BatchPosition pos_;
  std::vector<int64_t> order_;  // epoch_order for order_epoch_
  int64_t order_epoch_ = -1;
};

}  // namespace pt
