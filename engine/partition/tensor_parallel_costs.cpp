#include "engine/partition/tensor_parallel_costs.h"

#include <cstddef>
#include <vector>

#include "engine/partition/layer_costs.h"
#include "engine/train/stage_parameters.h"
#include "layers/tensor_parallel/shard_model.h"

namespace pt {

namespace {

// Rank 0 of T as the planner sees it: collectives keep the data's shape and move nothing;
// all-reduces are counted (bytes and calls) into the current layer's tally.
class CountingGroup final : public TensorParallelGroup {
 public:
  explicit CountingGroup(int T) : T_(T) {}
  int rank() const override { return 0; }
  int size() const override { return T_; }
  void all_reduce_sum(Backend&, float*, int64_t n, std::string_view) override {
    bytes += n * static_cast<int64_t>(sizeof(float));
    ++calls;
  }
  void all_gather(Backend& backend, const float* in, float* out, int64_t n,
                  std::string_view) override {
    for (int t = 0; t < T_; ++t)
      backend.copy_within(out + t * n, in, static_cast<size_t>(n) * sizeof(float));
  }
  void reduce_scatter_sum(Backend& backend, const float* in, float* out, int64_t n,
                          std::string_view) override {
    backend.copy_within(out, in, static_cast<size_t>(n) * sizeof(float));
  }
  int64_t bytes = 0;
  int calls = 0;

 private:
  int T_;
};

}  // namespace

struct TensorParallelCosts::Parts {
  std::function<Model()> make_model;
  Backend* device = nullptr;
  bool counted = false;  // the pass below runs on the first costs(): a run's plan needs none
  std::unique_ptr<CountingGroup> group;
  std::unique_ptr<Model> model;
  // Per layer, for one sample: all-reduce bytes of F and of I, and their calls.
  std::vector<int64_t> forward_bytes, backward_bytes;
  std::vector<int> forward_calls, backward_calls;
};

TensorParallelCosts::TensorParallelCosts(const std::function<Model()>& make_model, int T,
                                         Backend& device)
    : parts_(std::make_unique<Parts>()) {
  Parts& p = *parts_;
  p.make_model = make_model;
  p.device = &device;
  p.group = std::make_unique<CountingGroup>(T);
  p.model = std::make_unique<Model>(make_shard());
}

void TensorParallelCosts::count_collectives() {
  Parts& p = *parts_;
  if (p.counted) return;
  p.counted = true;
  const Model& m = *p.model;
  Backend& device = *p.device;
  const auto L = static_cast<size_t>(m.num_layers());
  p.forward_bytes.assign(L, 0);
  p.backward_bytes.assign(L, 0);
  p.forward_calls.assign(L, 0);
  p.backward_calls.assign(L, 0);
  // One sample through every layer and back; values are zeros (ids 0): only shapes matter.
  StageParameters params(m, 0, m.num_layers(), device, /*seed=*/0);
  const StepInfo info{0, 0, 0, true};
  SkipBoard skips;
  std::vector<std::unique_ptr<LayerContext>> contexts;
  Tensor x = device.empty(m.input_shape().with_batch(1), m.input_dtype());
  const std::vector<std::byte> zeros(x.bytes());
  if (x.bytes()) device.copy_from_host(x.data(), zeros.data(), x.bytes());
  for (size_t l = 0; l < L; ++l) {
    contexts.push_back(std::make_unique<LayerContext>(device, info, l));
    contexts.back()->set_skips(&skips);
    p.group->bytes = 0;
    p.group->calls = 0;
    x = m.layer(static_cast<int>(l)).forward(x, *contexts.back());
    p.forward_bytes[l] = p.group->bytes;
    p.forward_calls[l] = p.group->calls;
  }
  Tensor dy = device.empty(x.shape());
  device.fill(dy.f32(), 0.f, dy.numel());
  for (size_t l = L; l-- > 0;) {
    if (!m.needs_input_gradient(static_cast<int>(l))) break;
    p.group->bytes = 0;
    p.group->calls = 0;
    dy = m.layer(static_cast<int>(l)).backward_input(dy, *contexts[l]);
    p.backward_bytes[l] = p.group->bytes;
    p.backward_calls[l] = p.group->calls;
  }
  device.synchronize();
}

TensorParallelCosts::~TensorParallelCosts() = default;

int TensorParallelCosts::ranks() const { return parts_->group->size(); }

const Model& TensorParallelCosts::model() const { return *parts_->model; }

Model TensorParallelCosts::make_shard() const {
  return shard_model(parts_->make_model(), TensorParallel{parts_->group.get(), 0, ranks()});
}

ShardedCosts TensorParallelCosts::costs(int64_t microbatch) {
  count_collectives();
  const Parts& p = *parts_;
  ShardedCosts out = unsharded(estimate_costs(*p.model, microbatch));
  for (size_t l = 0; l < out.layers.size(); ++l) {
    const int calls = p.forward_calls[l] + p.backward_calls[l];
    if (calls == 0) continue;
    // The planner prices every call of a layer alike: the mean bytes per call.
    out.allreduce_bytes[l] = (p.forward_bytes[l] + p.backward_bytes[l]) * microbatch / calls;
    out.forward_allreduces[l] = p.forward_calls[l];
    out.backward_allreduces[l] = p.backward_calls[l];
  }
  return out;
}

}  // namespace pt
