#include "engine/comm/recording_communicator.h"

#include <vector>

#include "engine/core/error.h"

namespace pt {

namespace {

class RecordedRequest final : public CommRequest {
 public:
  RecordedRequest(std::unique_ptr<CommRequest> inner, FlightRecorder& recorder, uint64_t ticket)
      : inner_(std::move(inner)), recorder_(recorder), ticket_(ticket) {}

  bool test() override {
    const bool done = inner_->test();
    if (done) end(FlightState::finished);
    return done;
  }
  void wait(std::string_view what) override {
    try {
      inner_->wait(what);
    } catch (const TimeoutError&) {
      end(FlightState::timed_out);
      throw;
    } catch (...) {
      end(FlightState::failed);
      throw;
    }
    end(FlightState::finished);
  }

 private:
  void end(FlightState s) {
    recorder_.finish(ticket_, s);
    ticket_ = 0;
  }
  std::unique_ptr<CommRequest> inner_;
  FlightRecorder& recorder_;
  uint64_t ticket_;
};

class RecordingCommunicator final : public Communicator {
 public:
  RecordingCommunicator(std::unique_ptr<Communicator> inner, std::string name,
                        FlightRecorder& recorder)
      : inner_(std::move(inner)), recorder_(recorder) {
    std::vector<int> ranks;
    for (int r = 0; r < inner_->size(); ++r) ranks.push_back(inner_->world_rank(r));
    group_ = recorder_.group(name, ranks);
  }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int world_rank(int r) const override { return inner_->world_rank(r); }
  std::string describe() const override { return inner_->describe(); }
  double timeout_s() const override { return inner_->timeout_s(); }
  bool device_memory() const override { return inner_->device_memory(); }
  int max_tag() const override { return inner_->max_tag(); }

  void all_reduce(void* data, int64_t n, ElemType type, ReduceOp op,
                  std::string_view what) override {
    recorder_.record(collective(CommOp::all_reduce, n * static_cast<int64_t>(elem_size(type))),
                     [&] { inner_->all_reduce(data, n, type, op, what); });
  }
  void reduce_scatter(const float* in, float* out, int64_t count, ReduceOp op,
                      std::string_view what) override {
    recorder_.record(
        collective(CommOp::reduce_scatter, count * size() * static_cast<int64_t>(sizeof(float))),
        [&] { inner_->reduce_scatter(in, out, count, op, what); });
  }
  void all_gather(const void* in, void* out, size_t bytes, std::string_view what) override {
    recorder_.record(collective(CommOp::all_gather, static_cast<int64_t>(bytes)),
                     [&] { inner_->all_gather(in, out, bytes, what); });
  }
  void broadcast(void* data, size_t bytes, int root, std::string_view what) override {
    FlightEvent e = collective(CommOp::broadcast, static_cast<int64_t>(bytes));
    e.peer = inner_->world_rank(root);
    recorder_.record(e, [&] { inner_->broadcast(data, bytes, root, what); });
  }
  void barrier(std::string_view what) override {
    recorder_.record(collective(CommOp::barrier, 0), [&] { inner_->barrier(what); });
  }

  std::unique_ptr<CommRequest> isend(const void* data, size_t bytes, int dst, int tag) override {
    FlightEvent e = point_to_point(FlightKind::send, CommOp::isend, dst, tag, bytes);
    const uint64_t ticket = recorder_.begin(e);
    std::unique_ptr<CommRequest> inner;
    try {
      inner = inner_->isend(data, bytes, dst, tag);
    } catch (...) {
      recorder_.finish(ticket, FlightState::failed);
      throw;
    }
    return std::make_unique<RecordedRequest>(std::move(inner), recorder_, ticket);
  }
  void recv(void* data, size_t bytes, int src, int tag, std::string_view what) override {
    recorder_.record(point_to_point(FlightKind::recv, CommOp::recv, src, tag, bytes),
                     [&] { inner_->recv(data, bytes, src, tag, what); });
  }

  std::unique_ptr<Communicator> split(int colour, int key, std::string name) override {
    std::unique_ptr<Communicator> part;
    recorder_.record(collective(CommOp::split, 0),
                     [&] { part = inner_->split(colour, key, name); });
    return record_calls(std::move(part), std::move(name), recorder_);
  }

 private:
  FlightEvent collective(CommOp op, int64_t bytes) const {
    FlightEvent e;
    e.kind = FlightKind::collective;
    e.op = static_cast<uint8_t>(op);
    e.group = group_;
    e.bytes = bytes;
    return e;
  }
  FlightEvent point_to_point(FlightKind kind, CommOp op, int peer, int tag, size_t bytes) const {
    FlightEvent e;
    e.kind = kind;
    e.op = static_cast<uint8_t>(op);
    e.group = group_;
    // An invalid rank is the inner communicator's to refuse (with its message).
    e.peer = peer >= 0 && peer < size() ? inner_->world_rank(peer) : -1;
    e.tag = tag;
    e.bytes = static_cast<int64_t>(bytes);
    return e;
  }

  std::unique_ptr<Communicator> inner_;
  FlightRecorder& recorder_;
  int group_ = -1;
};

}  // namespace

std::unique_ptr<Communicator> record_calls(std::unique_ptr<Communicator> inner, std::string name,
                                           FlightRecorder& recorder) {
  return std::make_unique<RecordingCommunicator>(std::move(inner), std::move(name), recorder);
}

}  // namespace pt
