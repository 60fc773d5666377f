// In-process communicators (see in_process.h). A Group is the state the ranks of one group share:
// a reusable rendezvous for collectives and message queues for point-to-point. Each collective
// is at most two rendezvous:
//   A  every rank has deposited its pointers (the last rank to arrive checks that all ranks
//      called the same operation with the same sizes, and sizes the shared result buffer);
//      each rank then does its part of the work, reading the other ranks' buffers;
//   B  (when other ranks read this rank's buffers) nobody returns before everyone is done.
// Deposits and result buffers alternate between two slots by the parity of the collective's
// sequence number: a rank can only reach collective k + 2 once every rank has arrived at k + 1,
// i.e. has finished reading collective k's slot, so no third rendezvous is needed.
#include "engine/comm/in_process.h"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {
namespace {

using Clock = std::chrono::steady_clock;

class Group;

enum class Kind : uint8_t { all_reduce, reduce_scatter, all_gather, broadcast, barrier, split };

std::string_view type_name(ElemType t) {
  switch (t) {
    case ElemType::f32: return "f32";
    case ElemType::f64: return "f64";
    case ElemType::i64: return "i64";
  }
  return "?";
}

// What one rank brings to a collective; the other ranks read it between rendezvous A and B.
struct Deposit {
  Kind kind = Kind::barrier;
  const void* in = nullptr;
  int64_t n = 0;  // elements (all_reduce, reduce_scatter) or bytes (all_gather, broadcast)
  ElemType type = ElemType::f32;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  int colour = 0;
  int key = 0;
  // split's answer for this rank, filled in by the last rank to arrive.
  std::shared_ptr<Group> new_group = nullptr;
  int new_rank = -1;

  // What must agree across ranks, as the message shows it.
  std::string args() const {
    switch (kind) {
      case Kind::all_reduce:
        return fmt::format("all_reduce({} elements, {}, {})", n, type_name(type),
                           op == ReduceOp::sum ? "sum" : "mean");
      case Kind::reduce_scatter:
        return fmt::format("reduce_scatter({} per rank, {})", n,
                           op == ReduceOp::sum ? "sum" : "mean");
      case Kind::all_gather: return fmt::format("all_gather({} bytes)", n);
      case Kind::broadcast: return fmt::format("broadcast({} bytes, root {})", n, root);
      case Kind::barrier: return "barrier()";
      case Kind::split: return "split()";
    }
    return "?";
  }
  bool agrees_with(const Deposit& o) const {
    return kind == o.kind && n == o.n && type == o.type && op == o.op && root == o.root;
  }
};

class Group {
 public:
  Group(std::vector<int> world_ranks, double timeout_s)
      : world_ranks(std::move(world_ranks)),
        timeout_s(timeout_s),
        arrived_(this->world_ranks.size(), 0) {
    for (auto& d : deposits_) d.resize(this->world_ranks.size());
  }

  int size() const { return static_cast<int>(world_ranks.size()); }

  const std::vector<int> world_ranks;  // of each group rank
  const double timeout_s;

  // Waits until every rank of the group has called meet() (the same number of times). `deposit`,
  // when given, is published in slot `parity` first; the last rank to arrive runs
  // on_all_arrived(deposits of the slot) under the lock. Throws TimeoutError naming the ranks that
  // did not arrive by `deadline`; after any failure the group is unusable and every meet throws.
  template <typename F>
  void meet(int rank, const Deposit* deposit, int parity, Clock::time_point deadline,
            std::string_view what, std::string_view who, F&& on_all_arrived) {
    std::unique_lock lock(mutex_);
    throw_if_failed(what, who);
    if (deposit) deposits_[parity][rank] = *deposit;
    arrived_[rank] = 1;
    if (++arrived_count_ == size()) {
      try {
        on_all_arrived(deposits_[parity]);
      } catch (const UsageError& e) {
        fail(e.what(), /*usage=*/true);
        throw;
      }
      std::fill(arrived_.begin(), arrived_.end(), 0);
      arrived_count_ = 0;
      ++generation_;
      changed_.notify_all();
      return;
    }
    const uint64_t generation = generation_;
    changed_.wait_until(lock, deadline,
                        [&] { return generation_ != generation || !failure_.empty(); });
    if (generation_ != generation) return;
    if (failure_.empty()) {
      std::vector<int> missing;
      for (int r = 0; r < size(); ++r)
        if (!arrived_[r]) missing.push_back(world_ranks[r]);
      std::string message = fmt::format(
          "{}: {}: timed out after {:g} s waiting for world rank{} {}, which did not arrive", what,
          who, timeout_s, missing.size() == 1 ? "" : "s", format_ranks(missing));
      fail(message, /*usage=*/false);
      throw TimeoutError(message);
    }
    throw_if_failed(what, who);
  }

  // The slots, read between rendezvous without the lock (see the file comment for why that is
  // safe).
  const std::vector<Deposit>& deposits(int parity) const { return deposits_[parity]; }
  std::vector<std::byte>& result(int parity) { return results_[parity]; }

  // ---- point to point: one FIFO per (source, destination, tag) ------------------------------
  void post(int src, int dst, int tag, std::vector<std::byte> message) {
    {
      std::lock_guard lock(p2p_mutex_);
      queues_[{src, dst, tag}].push_back(std::move(message));
    }
    p2p_changed_.notify_all();
  }
  // The oldest message, or nothing when none came by `deadline`.
  std::optional<std::vector<std::byte>> take(int src, int dst, int tag,
                                             Clock::time_point deadline) {
    std::unique_lock lock(p2p_mutex_);
    auto& queue = queues_[{src, dst, tag}];  // std::map: the reference stays valid while waiting
    if (!p2p_changed_.wait_until(lock, deadline, [&] { return !queue.empty(); }))
      return std::nullopt;
    std::vector<std::byte> message = std::move(queue.front());
    queue.pop_front();
    return message;
  }

 private:
  void fail(std::string reason, bool usage) {
    if (failure_.empty()) {
      failure_ = std::move(reason);
      failure_is_usage_ = usage;
    }
    changed_.notify_all();
  }
  void throw_if_failed(std::string_view what, std::string_view who) const {
    if (failure_.empty()) return;
    std::string message = fmt::format("{}: {}: the group is unusable after an earlier failure: {}",
                                      what, who, failure_);
    if (failure_is_usage_) throw UsageError(message);
    throw TimeoutError(message);
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<char> arrived_;  // per rank, for the current rendezvous
  int arrived_count_ = 0;
  uint64_t generation_ = 0;  // completed rendezvous
  std::string failure_;      // set once; the group is unusable from then on
  bool failure_is_usage_ = false;
  std::array<std::vector<Deposit>, 2> deposits_;
  std::array<std::vector<std::byte>, 2> results_;

  std::mutex p2p_mutex_;
  std::condition_variable p2p_changed_;
  std::map<std::tuple<int, int, int>, std::deque<std::vector<std::byte>>> queues_;
};

// Buffered sends complete when isend returns.
class CompletedRequest final : public CommRequest {
 public:
  bool test() override { return true; }
  void wait(std::string_view) override {}
};

// Elements [lo, hi) of n that rank r of R reduces.
std::pair<int64_t, int64_t> slice(int64_t n, int r, int R) { return {n * r / R, n * (r + 1) / R}; }

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<Group> group, int rank, std::string name)
      : group_(std::move(group)),
        rank_(rank),
        describe_(fmt::format("in_process '{}': rank {} of {} (world ranks {})", name, rank,
                              group_->size(), format_ranks(group_->world_ranks))) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  int world_rank(int r) const override {
    check_rank(r, "world_rank", "rank");
    return group_->world_ranks[r];
  }
  std::string describe() const override { return describe_; }
  double timeout_s() const override { return group_->timeout_s; }
  int max_tag() const override { return std::numeric_limits<int>::max(); }

  void all_reduce(void* data, int64_t n, ElemType type, ReduceOp op,
                  std::string_view what) override {
    check_count(n, what);
    const size_t es = elem_size(type);
    const size_t bytes = static_cast<size_t>(n) * es;
    const int parity = next_parity();
    const auto deadline = deadline_after(timeout_s());
    const Deposit mine{.kind = Kind::all_reduce, .in = data, .n = n, .type = type, .op = op};
    group_->meet(rank_, &mine, parity, deadline, what, describe_, [&](std::vector<Deposit>& all) {
      check_agree(all, what);
      if (group_->result(parity).size() < bytes) group_->result(parity).resize(bytes);
    });
    // Rank r reduces slice r of every element, in rank order: the same bits whoever computes it.
    const std::vector<Deposit>& all = group_->deposits(parity);
    std::byte* result = group_->result(parity).data();
    const auto [lo, hi] = slice(n, rank_, size());
    if (hi > lo) {
      std::byte* part = result + lo * es;
      std::memcpy(part, static_cast<const std::byte*>(all[0].in) + lo * es, (hi - lo) * es);
      for (int r = 1; r < size(); ++r)
        accumulate(part, static_cast<const std::byte*>(all[r].in) + lo * es, hi - lo, type);
      if (op == ReduceOp::mean) divide_by_ranks(part, hi - lo, type, size());
    }
    // B: every slice is written and nobody reads the inputs any more (data is also the output).
    group_->meet(rank_, nullptr, parity, deadline, what, describe_, [](std::vector<Deposit>&) {});
    if (bytes) std::memcpy(data, result, bytes);
  }

  void reduce_scatter(const float* in, float* out, int64_t count, ReduceOp op,
                      std::string_view what) override {
    check_count(count, what);
    const int parity = next_parity();
    const auto deadline = deadline_after(timeout_s());
    const Deposit mine{.kind = Kind::reduce_scatter, .in = in, .n = count, .op = op};
    group_->meet(rank_, &mine, parity, deadline, what, describe_,
                 [&](std::vector<Deposit>& all) { check_agree(all, what); });
    const std::vector<Deposit>& all = group_->deposits(parity);
    const int64_t offset = rank_ * count;  // this rank's block of every input
    if (count) {
      std::memcpy(out, static_cast<const float*>(all[0].in) + offset, count * sizeof(float));
      for (int r = 1; r < size(); ++r)
        accumulate(out, static_cast<const float*>(all[r].in) + offset, count, ElemType::f32);
      if (op == ReduceOp::mean) divide_by_ranks(out, count, ElemType::f32, size());
    }
    // B: the other ranks may still be reading this rank's input.
    group_->meet(rank_, nullptr, parity, deadline, what, describe_, [](std::vector<Deposit>&) {});
  }

  void all_gather(const void* in, void* out, size_t bytes, std::string_view what) override {
    const int parity = next_parity();
    const auto deadline = deadline_after(timeout_s());
    const Deposit mine{.kind = Kind::all_gather, .in = in, .n = static_cast<int64_t>(bytes)};
    group_->meet(rank_, &mine, parity, deadline, what, describe_,
                 [&](std::vector<Deposit>& all) { check_agree(all, what); });
    const std::vector<Deposit>& all = group_->deposits(parity);
    if (bytes)
      for (int r = 0; r < size(); ++r)
        std::memcpy(static_cast<std::byte*>(out) + r * bytes, all[r].in, bytes);
    group_->meet(rank_, nullptr, parity, deadline, what, describe_, [](std::vector<Deposit>&) {});
  }

  void broadcast(void* data, size_t bytes, int root, std::string_view what) override {
    check_rank(root, what, "root");
    const int parity = next_parity();
    const auto deadline = deadline_after(timeout_s());
    const Deposit mine{
        .kind = Kind::broadcast, .in = data, .n = static_cast<int64_t>(bytes), .root = root};
    group_->meet(rank_, &mine, parity, deadline, what, describe_,
                 [&](std::vector<Deposit>& all) { check_agree(all, what); });
    if (rank_ != root && bytes) std::memcpy(data, group_->deposits(parity)[root].in, bytes);
    group_->meet(rank_, nullptr, parity, deadline, what, describe_, [](std::vector<Deposit>&) {});
  }

  void barrier(std::string_view what) override {
    const Deposit mine{.kind = Kind::barrier};
    group_->meet(rank_, &mine, next_parity(), deadline_after(timeout_s()), what, describe_,
                 [&](std::vector<Deposit>& all) { check_agree(all, what); });
  }

  std::unique_ptr<CommRequest> isend(const void* data, size_t bytes, int dst, int tag) override {
    check_rank(dst, "isend", "destination");
    check_tag(tag, "isend");
    std::vector<std::byte> message(bytes);
    if (bytes) std::memcpy(message.data(), data, bytes);
    group_->post(rank_, dst, tag, std::move(message));
    return std::make_unique<CompletedRequest>();
  }

  void recv(void* data, size_t bytes, int src, int tag, std::string_view what) override {
    check_rank(src, what, "source");
    check_tag(tag, what);
    std::optional<std::vector<std::byte>> message =
        group_->take(src, rank_, tag, deadline_after(timeout_s()));
    if (!message)
      throw TimeoutError(
          fmt::format("{}: {}: recv timed out after {:g} s waiting for world rank {} (tag {})",
                      what, describe_, timeout_s(), group_->world_ranks[src], tag));
    if (message->size() != bytes)
      throw UsageError(
          fmt::format("{}: {}: the message from world rank {} (tag {}) has {} bytes but the "
                      "receive expects {} bytes",
                      what, describe_, group_->world_ranks[src], tag, message->size(), bytes));
    if (bytes) std::memcpy(data, message->data(), bytes);
  }

  std::unique_ptr<Communicator> split(int colour, int key, std::string name) override {
    if (colour < 0)
      throw UsageError(fmt::format("split '{}': {}: colour {} is negative; colours are >= 0", name,
                                   describe_, colour));
    const int parity = next_parity();
    const Deposit mine{.kind = Kind::split, .colour = colour, .key = key};
    group_->meet(rank_, &mine, parity, deadline_after(timeout_s()), name, describe_,
                 [&](std::vector<Deposit>& all) {
                   check_agree(all, name);
                   // Members of each colour, ordered by (key, rank) as MPI_Comm_split does.
                   std::map<int, std::vector<std::pair<int, int>>> members;
                   for (int r = 0; r < size(); ++r)
                     members[all[r].colour].emplace_back(all[r].key, r);
                   for (auto& [c, keyed] : members) {
                     std::sort(keyed.begin(), keyed.end());
                     std::vector<int> world;
                     for (const auto& kr : keyed) world.push_back(group_->world_ranks[kr.second]);
                     auto group = std::make_shared<Group>(std::move(world), timeout_s());
                     for (size_t i = 0; i < keyed.size(); ++i) {
                       all[keyed[i].second].new_group = group;
                       all[keyed[i].second].new_rank = static_cast<int>(i);
                     }
                   }
                 });
    const Deposit& answer = group_->deposits(parity)[rank_];
    return std::make_unique<InProcessCommunicator>(answer.new_group, answer.new_rank,
                                                   std::move(name));
  }

 private:
  int next_parity() { return static_cast<int>(collectives_++ & 1); }

  void check_rank(int r, std::string_view what, std::string_view role) const {
    if (r < 0 || r >= size())
      throw UsageError(fmt::format("{}: {}: {} {} is not a rank of this group (0..{})", what,
                                   describe_, role, r, size() - 1));
  }
  void check_tag(int tag, std::string_view what) const {
    if (tag < 0) throw UsageError(fmt::format("{}: {}: tag {} is negative", what, describe_, tag));
  }
  void check_count(int64_t n, std::string_view what) const {
    if (n < 0)
      throw UsageError(fmt::format("{}: {}: element count {} is negative", what, describe_, n));
  }
  // Run by the last rank to arrive: every rank called the same collective with the same sizes.
  void check_agree(const std::vector<Deposit>& all, std::string_view what) const {
    for (int r = 1; r < size(); ++r)
      if (!all[r].agrees_with(all[0]))
        throw UsageError(
            fmt::format("{}: {}: ranks disagree: world rank {} called {} but world rank {} called "
                        "{}; every rank "
                        "must call the same collectives in the same order with the same sizes",
                        what, describe_, group_->world_ranks[0], all[0].args(),
                        group_->world_ranks[r], all[r].args()));
  }

  std::shared_ptr<Group> group_;
  int rank_;
  std::string describe_;
  uint64_t collectives_ = 0;  // called so far: its parity picks the slot
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_in_process_group(int size, double timeout_s,
                                                                 std::string name) {
  if (size < 1) throw UsageError(fmt::format("in-process group '{}': size {} < 1", name, size));
  if (!(timeout_s > 0))
    throw UsageError(
        fmt::format("in-process group '{}': timeout {} s must be > 0", name, timeout_s));
  std::vector<int> world(size);
  for (int r = 0; r < size; ++r) world[r] = r;
  auto group = std::make_shared<Group>(std::move(world), timeout_s);
  std::vector<std::unique_ptr<Communicator>> ranks;
  for (int r = 0; r < size; ++r)
    ranks.push_back(std::make_unique<InProcessCommunicator>(group, r, name));
  return ranks;
}

}  // namespace pt
