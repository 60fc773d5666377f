// Backend::copy_to between backends that cannot reach each other's memory: the staging through
// the host that engine/core/backend.cpp writes once for every pair of backends. A GPU is played by
// HiddenMemoryBackend: host heap memory that it declares the host cannot reach, so every byte
// must pass through its copy_to_host / copy_from_host, which count the calls.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/core/backend_registry.h"

using namespace pt;

namespace {

class HiddenMemoryBackend final : public Backend {
 public:
  explicit HiddenMemoryBackend(int index) : index_(index) {}

  int to_host = 0, from_host = 0, syncs = 0;  // calls seen

  DeviceId device() const override { return DeviceId{DeviceKind::cuda, index_}; }
  std::string describe() const override { return "hidden-memory test backend"; }

  void* allocate(size_t bytes) override { return std::malloc(bytes); }
  void deallocate(void* ptr, size_t) override { std::free(ptr); }
  MemoryStats memory_stats() const override { return {}; }
  void reset_peak() override {}
  void set_memory_limit(size_t) override {}

  bool host_accessible() const override { return false; }
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override {
    ++from_host;
    std::memcpy(dst, host_src, bytes);
  }
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override {
    ++to_host;
    std::memcpy(host_dst, src, bytes);
  }
  void copy_within(void* dst, const void* src, size_t bytes) override {
    std::memmove(dst, src, bytes);
  }
  // Reaches no other backend, not even another of its own kind (GPUs without peer access).
  bool copy_to_peer(Backend&, void*, const void*, size_t) override { return false; }
  std::unique_ptr<Event> record_event() override { unused("record_event"); }
  void synchronize() override { ++syncs; }

  void set_num_threads(int) override {}
  int num_threads() const override { return 1; }
  void bind_current_thread() override {}

  // ---- ops: not used by copies ----
  void gemm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
            int64_t, float, float*, int64_t) override {
    unused("gemm");
  }
  void fill(float*, float, int64_t) override { unused("fill"); }
  void add(const float*, const float*, float*, int64_t) override { unused("add"); }
  void axpy(float, const float*, float*, int64_t) override { unused("axpy"); }
  void scale(float, float*, int64_t) override { unused("scale"); }
  void add_bias(float*, const float*, int64_t, int64_t) override { unused("add_bias"); }
  void sum_rows_accumulate(const float*, float*, int64_t, int64_t) override {
    unused("sum_rows_accumulate");
  }
  void activation_forward(Activation, const float*, float*, int64_t) override {
    unused("activation_forward");
  }
  void activation_backward(Activation, const float*, const float*, const float*, float*,
                           int64_t) override {
    unused("activation_backward");
  }
  void dropout_forward(const float*, float*, int64_t, float, uint64_t) override {
    unused("dropout_forward");
  }
  void dropout_backward(const float*, float*, int64_t, float, uint64_t) override {
    unused("dropout_backward");
  }
  void layernorm_forward(const float*, const float*, const float*, float*, float*, float*, int64_t,
                         int64_t, float) override {
    unused("layernorm_forward");
  }
  void layernorm_backward_input(const float*, const float*, const float*, const float*,
                                const float*, float*, int64_t, int64_t) override {
    unused("layernorm_backward_input");
  }
  void layernorm_backward_weight(const float*, const float*, const float*, const float*, float*,
                                 float*, int64_t, int64_t) override {
    unused("layernorm_backward_weight");
  }
  double softmax_xent_forward(const float*, const int32_t*, float*, int64_t, int64_t) override {
    unused("softmax_xent_forward");
  }
  void softmax_xent_backward(const float*, const int32_t*, float*, int64_t, int64_t,
                             float) override {
    unused("softmax_xent_backward");
  }
  double mse_forward(const float*, const float*, int64_t) override { unused("mse_forward"); }
  void mse_backward(const float*, const float*, float*, int64_t, float) override {
    unused("mse_backward");
  }
  int64_t count_correct(const float*, const int32_t*, int64_t, int64_t) override {
    unused("count_correct");
  }
  void softmax_partials(const float*, const int32_t*, float*, int64_t, const VocabRange&) override {
    unused("softmax_partials");
  }
  SoftmaxTotals softmax_combine(const float*, const int32_t*, float*, int64_t, int64_t) override {
    unused("softmax_combine");
  }
  void softmax_xent_backward_slice(const float*, const int32_t*, const float*, float*, int64_t,
                                   const VocabRange&, float) override {
    unused("softmax_xent_backward_slice");
  }
  void conv2d_forward(const Conv2dShape&, const float*, const float*, const float*,
                      float*) override {
    unused("conv2d_forward");
  }
  void conv2d_backward_input(const Conv2dShape&, const float*, const float*, float*) override {
    unused("conv2d_backward_input");
  }
  void conv2d_backward_weight(const Conv2dShape&, const float*, const float*, float*,
                              float*) override {
    unused("conv2d_backward_weight");
  }
  void maxpool2d_forward(const Pool2dShape&, const float*, float*, int32_t*) override {
    unused("maxpool2d_forward");
  }
  void maxpool2d_backward(const Pool2dShape&, const float*, const int32_t*, float*) override {
    unused("maxpool2d_backward");
  }
  void avgpool2d_forward(const Pool2dShape&, const float*, float*) override {
    unused("avgpool2d_forward");
  }
  void avgpool2d_backward(const Pool2dShape&, const float*, float*) override {
    unused("avgpool2d_backward");
  }
  void embedding_forward(const int32_t*, const float*, float*, int64_t, int64_t, int64_t) override {
    unused("embedding_forward");
  }
  void embedding_backward_weight(const int32_t*, const float*, float*, int64_t, int64_t) override {
    unused("embedding_backward_weight");
  }
  void embedding_forward_slice(const int32_t*, const float*, float*, int64_t, int64_t,
                               const VocabRange&) override {
    unused("embedding_forward_slice");
  }
  void embedding_backward_weight_slice(const int32_t*, const float*, float*, int64_t, int64_t,
                                       const VocabRange&) override {
    unused("embedding_backward_weight_slice");
  }
  void attention_forward(const float*, float*, float*, int64_t, int64_t, int64_t, int64_t,
                         float) override {
    unused("attention_forward");
  }
  void attention_backward(const float*, const float*, const float*, const float*, float*, int64_t,
                          int64_t, int64_t, int64_t, float) override {
    unused("attention_backward");
  }
  double sum_squares(const float*, int64_t) override { unused("sum_squares"); }
  bool all_finite(const float*, int64_t) override { unused("all_finite"); }
  void sgd_update(const float*, const float*, float*, float*, int64_t, const SgdParams&) override {
    unused("sgd_update");
  }
  void adamw_update(const float*, const float*, float*, float*, float*, int64_t,
                    const AdamWParams&) override {
    unused("adamw_update");
  }

 private:
  [[noreturn]] static void unused(const char* op) {
    throw std::logic_error(std::string("HiddenMemoryBackend::") + op + " is not part of this test");
  }
  int index_;
};

std::vector<float> iota(size_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.5f);
  return v;
}

// The bytes of `t` (on `be`), read the way the host may: through copy_to_host.
std::vector<float> read(Backend& be, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  be.copy_to_host(out.data(), t.data(), t.bytes());
  return out;
}

std::unique_ptr<Backend> open_cpu(int index) {
  BackendOptions options;
  options.index = index;
  return open_backend("cpu", options);
}

}  // namespace

TEST_CASE("copy_to: host-accessible source -> hidden memory: one upload straight from the source") {
  auto cpu = open_cpu(0);
  HiddenMemoryBackend gpu(0);
  const auto data = iota(1000);
  Tensor src = cpu->empty(Shape{1000});
  cpu->copy_from_host(src.data(), data.data(), src.bytes());

  Tensor dst = cpu->copy_to(gpu, src);
  CHECK(dst.backend() == &gpu);
  CHECK(dst.device() == gpu.device());
  CHECK_FALSE(dst.host_accessible());
  CHECK(src.host_accessible());
  CHECK(gpu.from_host == 1);
  CHECK(gpu.to_host == 0);
  CHECK(read(gpu, dst) == data);
}

TEST_CASE("copy_to: hidden memory -> host-accessible destination: one download straight into it") {
  auto cpu = open_cpu(0);
  HiddenMemoryBackend gpu(0);
  const auto data = iota(777);
  Tensor src = gpu.empty(Shape{777});
  gpu.copy_from_host(src.data(), data.data(), src.bytes());
  gpu.from_host = 0;

  Tensor dst = cpu->empty(Shape{777});
  gpu.copy_to(*cpu, dst.data(), src.data(), src.bytes());
  CHECK(gpu.to_host == 1);
  CHECK(gpu.from_host == 0);
  std::vector<float> got(777);
  std::memcpy(got.data(), dst.data(), dst.bytes());  // host memory: read directly
  CHECK(got == data);
}

TEST_CASE("copy_to: between two hidden memories (no peer access): through a host buffer") {
  HiddenMemoryBackend a(0), b(1);
  const auto data = iota(4096);
  Tensor src = a.empty(Shape{64, 64});
  a.copy_from_host(src.data(), data.data(), src.bytes());
  a.from_host = 0;

  Tensor dst = a.copy_to(b, src);
  CHECK(dst.backend() == &b);
  CHECK(dst.shape() == src.shape());
  CHECK(a.to_host == 1);
  CHECK(b.from_host == 1);
  CHECK(a.from_host == 0);
  CHECK(b.to_host == 0);
  CHECK(read(b, dst) == data);
}

TEST_CASE("copy_to: the peer copy when the backends reach each other; nothing for zero bytes") {
  auto c0 = open_cpu(0);
  auto c1 = open_cpu(1);
  const auto data = iota(10);
  Tensor src = c0->empty(Shape{10});
  c0->copy_from_host(src.data(), data.data(), src.bytes());
  Tensor dst = c0->copy_to(*c1, src);
  CHECK(dst.backend() == c1.get());
  CHECK(read(*c1, dst) == data);

  HiddenMemoryBackend gpu(0);
  Tensor empty = c0->empty(Shape{0, 3});
  Tensor moved = c0->copy_to(gpu, empty);
  CHECK(moved.shape() == Shape{0, 3});
  CHECK(gpu.from_host == 0);
  CHECK(gpu.to_host == 0);

  // Onto the same backend: copy_within, no staging.
  Tensor self = gpu.empty(Shape{10});
  gpu.copy_from_host(self.data(), data.data(), self.bytes());
  gpu.from_host = 0;
  Tensor same = gpu.copy_to(gpu, self);
  CHECK(gpu.from_host == 0);
  CHECK(gpu.to_host == 0);
  CHECK(read(gpu, same) == data);
}
