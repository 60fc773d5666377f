// 2-D convolution on cuDNN 9's legacy convolution API (fp32 NCHW, cross-correlation).
//
// Per Conv2dShape we build, once, the tensor descriptors of x (N,C,H,W), y (N,K,P,Q) and the bias
// (1,K,1,1), the filter descriptor of w (K,C,R,S), and one convolution descriptor per op. Each op
// has its own convolution descriptor because the math type lives there, and cuDNN wants it set to
// the math type of the algorithm that runs (the heuristic may pick a different one per op).
//
// Algorithms come from cudnnGetConvolution*Algorithm_v7 (heuristics, no trial runs, so choosing
// allocates nothing and is deterministic): the first result, in cuDNN's order of expected speed,
// that succeeded, uses an allowed math type and needs at most 256 MiB of workspace. They are chosen
// per op on first use, so a forward-only run never queries backward heuristics.
//
// Math type: the descriptors ask for CUDNN_FMA_MATH (true fp32) or, with allow_tf32,
// CUDNN_DEFAULT_MATH (tf32 tensor cores allowed on Ampere and later). Never
// CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: for fp32 data it allows down-conversion to fp16.
//
// Semantics follow pt::Backend: forward and backward_input overwrite (beta = 0, so the old
// output is never read, NaNs included), backward_weight accumulates into dw and dbias (beta = 1).
#include "kernels/cuda/cudnn_conv.h"

#include <cudnn.h>

#include <array>
#include <climits>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/random.h"

namespace pt::cuda {

namespace {

// The most workspace one convolution may ask of the backend.
constexpr size_t kMaxWorkspaceBytes = size_t{256} << 20;

std::string shape_text(const Conv2dShape& s) {
  auto t = [](int64_t v) { return std::to_string(v); };
  return "x (" + t(s.N) + ", " + t(s.C) + ", " + t(s.H) + ", " + t(s.W) + "), w (" + t(s.K) + ", " +
         t(s.C) + ", " + t(s.R) + ", " + t(s.S) + "), stride (" + t(s.stride_h) + ", " +
         t(s.stride_w) + "), pad (" + t(s.pad_h) + ", " + t(s.pad_w) + "), y (" + t(s.N) + ", " +
         t(s.K) + ", " + t(s.P) + ", " + t(s.Q) + ")";
}

std::string status_text(cudnnStatus_t status) {
  return std::string(cudnnGetErrorString(status)) + " (" +
         std::to_string(static_cast<int>(status)) + ")";
}

void check(cudnnStatus_t status, const char* call, const Conv2dShape& s) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  throw std::runtime_error("cuDNN conv2d for " + shape_text(s) + ": " + call + " failed with " +
                           status_text(status));
}

// The legacy descriptors take int; larger sizes (and non-positive ones) are the caller's error.
int to_int(int64_t value, bool may_be_zero, const char* name, const Conv2dShape& s) {
  if (value > INT_MAX || value < (may_be_zero ? 0 : 1))
    throw ShapeError("conv2d (cuDNN): " + std::string(name) + " = " + std::to_string(value) +
                     " is out of range (" + (may_be_zero ? "0" : "1") + " to " +
                     std::to_string(INT_MAX) + ") in " + shape_text(s));
  return static_cast<int>(value);
}

struct ShapeKey {
  std::array<int64_t, 13> dims;
  bool operator==(const ShapeKey&) const = default;
};

struct ShapeKeyHash {
  size_t operator()(const ShapeKey& k) const {
    uint64_t h = 0;
    for (int64_t d : k.dims) h = hash_keys(h, static_cast<uint64_t>(d));
    return static_cast<size_t>(h);
  }
};

ShapeKey make_key(const Conv2dShape& s) {
  return ShapeKey{
      {s.N, s.C, s.H, s.W, s.K, s.R, s.S, s.stride_h, s.stride_w, s.pad_h, s.pad_w, s.P, s.Q}};
}

template <class Algo>
struct Choice {
  Algo algo;
  size_t workspace_bytes;
};

bool math_allowed(cudnnMathType_t math, bool allow_tf32) {
  if (math == CUDNN_FMA_MATH) return true;
  return allow_tf32 && (math == CUDNN_DEFAULT_MATH || math == CUDNN_TENSOR_OP_MATH);
}

// The first heuristic result that is usable. `workspace_of(algo)` asks cuDNN for the algorithm's
// workspace once the descriptor carries its math type (the larger of that and the heuristic's
// own figure is kept). Throws, listing why each candidate was passed over, when none is usable.
template <class Perf, class WorkspaceOf>
Choice<decltype(Perf::algo)> first_usable(const char* op, const std::vector<Perf>& results,
                                          int returned, bool allow_tf32,
                                          cudnnConvolutionDescriptor_t conv,
                                          WorkspaceOf workspace_of, const Conv2dShape& s) {
  std::string passed_over;
  for (int i = 0; i < returned; ++i) {
    const Perf& r = results[static_cast<size_t>(i)];
    const std::string name = "algo " + std::to_string(static_cast<int>(r.algo));
    if (r.status != CUDNN_STATUS_SUCCESS) {
      passed_over += "; " + name + ": " + status_text(r.status);
      continue;
    }
    if (!math_allowed(r.mathType, allow_tf32)) {
      passed_over += "; " + name + ": math type " + std::to_string(static_cast<int>(r.mathType));
      continue;
    }
    check(cudnnSetConvolutionMathType(conv, r.mathType), "cudnnSetConvolutionMathType", s);
    size_t bytes = 0;
    const cudnnStatus_t query = workspace_of(r.algo, &bytes);
    if (query != CUDNN_STATUS_SUCCESS) {
      passed_over += "; " + name + ": workspace query " + status_text(query);
      continue;
    }
    bytes = bytes > r.memory ? bytes : r.memory;
    if (bytes > kMaxWorkspaceBytes) {
      passed_over += "; " + name + ": workspace " + std::to_string(bytes) + " bytes";
      continue;
    }
    return {r.algo, bytes};
  }
  // Back to the requested math type, so a later retry asks the heuristic the same question.
  (void)cudnnSetConvolutionMathType(conv, allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
  throw std::runtime_error(
      "cuDNN conv2d for " + shape_text(s) + ": no usable " + op + " algorithm among " +
      std::to_string(returned) + " heuristic results (allow_tf32=" + (allow_tf32 ? "1" : "0") +
      ", workspace limit " + std::to_string(kMaxWorkspaceBytes) + " bytes" + passed_over + ")");
}

// The descriptors of one shape, and each op's algorithm once chosen. Destroys what it holds, so
// a half-built plan cleans up too.
struct ShapePlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv_forward = nullptr, conv_backward_data = nullptr,
                               conv_backward_filter = nullptr;
  std::optional<Choice<cudnnConvolutionFwdAlgo_t>> forward;
  std::optional<Choice<cudnnConvolutionBwdDataAlgo_t>> backward_data;
  std::optional<Choice<cudnnConvolutionBwdFilterAlgo_t>> backward_filter;

  ShapePlan() = default;
  ShapePlan(const ShapePlan&) = delete;
  ShapePlan& operator=(const ShapePlan&) = delete;
  ~ShapePlan() {
    for (cudnnConvolutionDescriptor_t c : {conv_forward, conv_backward_data, conv_backward_filter})
      if (c) (void)cudnnDestroyConvolutionDescriptor(c);
    if (w) (void)cudnnDestroyFilterDescriptor(w);
    for (cudnnTensorDescriptor_t t : {x, y, bias})
      if (t) (void)cudnnDestroyTensorDescriptor(t);
  }
};

// Device scratch for one call: null when the algorithm needs none.
void* workspace_for(size_t bytes, const WorkspaceFn& workspace, const Conv2dShape& s) {
  if (bytes == 0) return nullptr;
  void* ptr = workspace(bytes);
  if (ptr == nullptr)
    throw std::runtime_error("cuDNN conv2d for " + shape_text(s) + ": the backend gave no " +
                             std::to_string(bytes) + "-byte workspace");
  return ptr;
}

}  // namespace

struct CudnnConv::State {
  cudnnHandle_t handle = nullptr;
  bool allow_tf32 = false;
  std::unordered_map<ShapeKey, std::unique_ptr<ShapePlan>, ShapeKeyHash> plans;

  ~State() {
    plans.clear();
    if (handle) (void)cudnnDestroy(handle);
  }

  ShapePlan& plan_for(const Conv2dShape& s);
  const Choice<cudnnConvolutionFwdAlgo_t>& forward_algo(ShapePlan& p, const Conv2dShape& s);
  const Choice<cudnnConvolutionBwdDataAlgo_t>& backward_data_algo(ShapePlan& p,
                                                                  const Conv2dShape& s);
  const Choice<cudnnConvolutionBwdFilterAlgo_t>& backward_filter_algo(ShapePlan& p,
                                                                      const Conv2dShape& s);
};

ShapePlan& CudnnConv::State::plan_for(const Conv2dShape& s) {
  const ShapeKey key = make_key(s);
  if (auto it = plans.find(key); it != plans.end()) return *it->second;

  const int n = to_int(s.N, false, "N", s), c = to_int(s.C, false, "C", s),
            h = to_int(s.H, false, "H", s), w = to_int(s.W, false, "W", s),
            k = to_int(s.K, false, "K", s), filter_h = to_int(s.R, false, "R", s),
            filter_w = to_int(s.S, false, "S", s), p_out = to_int(s.P, false, "P", s),
            q_out = to_int(s.Q, false, "Q", s), stride_h = to_int(s.stride_h, false, "stride_h", s),
            stride_w = to_int(s.stride_w, false, "stride_w", s),
            pad_h = to_int(s.pad_h, true, "pad_h", s), pad_w = to_int(s.pad_w, true, "pad_w", s);

  auto plan = std::make_unique<ShapePlan>();
  check(cudnnCreateTensorDescriptor(&plan->x), "cudnnCreateTensorDescriptor", s);
  check(cudnnSetTensor4dDescriptor(plan->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w),
        "cudnnSetTensor4dDescriptor(x)", s);
  check(cudnnCreateFilterDescriptor(&plan->w), "cudnnCreateFilterDescriptor", s);
  check(cudnnSetFilter4dDescriptor(plan->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, k, c, filter_h,
                                   filter_w),
        "cudnnSetFilter4dDescriptor(w)", s);

  const cudnnMathType_t requested_math = allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  for (cudnnConvolutionDescriptor_t* conv :
       {&plan->conv_forward, &plan->conv_backward_data, &plan->conv_backward_filter}) {
    check(cudnnCreateConvolutionDescriptor(conv), "cudnnCreateConvolutionDescriptor", s);
    check(cudnnSetConvolution2dDescriptor(*conv, pad_h, pad_w, stride_h, stride_w, 1, 1,
                                          CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
          "cudnnSetConvolution2dDescriptor", s);
    check(cudnnSetConvolutionMathType(*conv, requested_math), "cudnnSetConvolutionMathType", s);
  }

  // cuDNN's own output size must be the one the caller allocated for.
  int out_n = 0, out_c = 0, out_h = 0, out_w = 0;
  check(cudnnGetConvolution2dForwardOutputDim(plan->conv_forward, plan->x, plan->w, &out_n, &out_c,
                                              &out_h, &out_w),
        "cudnnGetConvolution2dForwardOutputDim", s);
  if (out_n != n || out_c != k || out_h != p_out || out_w != q_out)
    throw ShapeError("conv2d (cuDNN): the output of " + shape_text(s) + " is (" +
                     std::to_string(out_n) + ", " + std::to_string(out_c) + ", " +
                     std::to_string(out_h) + ", " + std::to_string(out_w) +
                     "), not the shape's y: P = (H + 2 pad_h - R) / stride_h + 1, Q = (W + 2 "
                     "pad_w - S) / stride_w + 1");

  check(cudnnCreateTensorDescriptor(&plan->y), "cudnnCreateTensorDescriptor", s);
  check(
      cudnnSetTensor4dDescriptor(plan->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, k, p_out, q_out),
      "cudnnSetTensor4dDescriptor(y)", s);
  // (1, K, 1, 1) broadcasts over N, P, Q in cudnnAddTensor and is what BackwardBias reduces to.
  check(cudnnCreateTensorDescriptor(&plan->bias), "cudnnCreateTensorDescriptor", s);
  check(cudnnSetTensor4dDescriptor(plan->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, k, 1, 1),
        "cudnnSetTensor4dDescriptor(bias)", s);

  return *plans.emplace(key, std::move(plan)).first->second;
}

const Choice<cudnnConvolutionFwdAlgo_t>& CudnnConv::State::forward_algo(ShapePlan& p,
                                                                        const Conv2dShape& s) {
  if (p.forward) return *p.forward;
  int count = 0, returned = 0;
  check(cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &count),
        "cudnnGetConvolutionForwardAlgorithmMaxCount", s);
  std::vector<cudnnConvolutionFwdAlgoPerf_t> results(static_cast<size_t>(count > 0 ? count : 1));
  check(cudnnGetConvolutionForwardAlgorithm_v7(handle, p.x, p.w, p.conv_forward, p.y,
                                               static_cast<int>(results.size()), &returned,
                                               results.data()),
        "cudnnGetConvolutionForwardAlgorithm_v7", s);
  p.forward = first_usable(
      "forward", results, returned, allow_tf32, p.conv_forward,
      [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
        return cudnnGetConvolutionForwardWorkspaceSize(handle, p.x, p.w, p.conv_forward, p.y, algo,
                                                       bytes);
      },
      s);
  return *p.forward;
}

const Choice<cudnnConvolutionBwdDataAlgo_t>& CudnnConv::State::backward_data_algo(
    ShapePlan& p, const Conv2dShape& s) {
  if (p.backward_data) return *p.backward_data;
  int count = 0, returned = 0;
  check(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, &count),
        "cudnnGetConvolutionBackwardDataAlgorithmMaxCount", s);
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> results(
      static_cast<size_t>(count > 0 ? count : 1));
  check(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, p.w, p.y, p.conv_backward_data, p.x,
                                                    static_cast<int>(results.size()), &returned,
                                                    results.data()),
        "cudnnGetConvolutionBackwardDataAlgorithm_v7", s);
  p.backward_data = first_usable(
      "backward-data", results, returned, allow_tf32, p.conv_backward_data,
      [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(handle, p.w, p.y, p.conv_backward_data,
                                                            p.x, algo, bytes);
      },
      s);
  return *p.backward_data;
}

const Choice<cudnnConvolutionBwdFilterAlgo_t>& CudnnConv::State::backward_filter_algo(
    ShapePlan& p, const Conv2dShape& s) {
  if (p.backward_filter) return *p.backward_filter;
  int count = 0, returned = 0;
  check(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, &count),
        "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount", s);
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> results(
      static_cast<size_t>(count > 0 ? count : 1));
  check(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, p.x, p.y, p.conv_backward_filter, p.w,
                                                      static_cast<int>(results.size()), &returned,
                                                      results.data()),
        "cudnnGetConvolutionBackwardFilterAlgorithm_v7", s);
  p.backward_filter = first_usable(
      "backward-filter", results, returned, allow_tf32, p.conv_backward_filter,
      [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(
            handle, p.x, p.y, p.conv_backward_filter, p.w, algo, bytes);
      },
      s);
  return *p.backward_filter;
}

CudnnConv::CudnnConv(cudaStream_t stream, bool allow_tf32) : state_(std::make_unique<State>()) {
  state_->allow_tf32 = allow_tf32;
  cudnnStatus_t status = cudnnCreate(&state_->handle);
  if (status != CUDNN_STATUS_SUCCESS) {
    state_->handle = nullptr;
    throw std::runtime_error("cuDNN: cudnnCreate failed with " + status_text(status));
  }
  status = cudnnSetStream(state_->handle, stream);
  if (status != CUDNN_STATUS_SUCCESS)
    throw std::runtime_error("cuDNN: cudnnSetStream failed with " + status_text(status));
}

CudnnConv::~CudnnConv() = default;

size_t CudnnConv::cached_shapes() const { return state_->plans.size(); }

void CudnnConv::forward(const Conv2dShape& s, const float* x, const float* w, const float* bias,
                        float* y, const WorkspaceFn& workspace) {
  ShapePlan& p = state_->plan_for(s);
  const auto& algo = state_->forward_algo(p, s);
  void* scratch = workspace_for(algo.workspace_bytes, workspace, s);
  const float one = 1.f, zero = 0.f;
  check(cudnnConvolutionForward(state_->handle, &one, p.x, x, p.w, w, p.conv_forward, algo.algo,
                                scratch, algo.workspace_bytes, &zero, p.y, y),
        "cudnnConvolutionForward", s);
  if (bias)
    check(cudnnAddTensor(state_->handle, &one, p.bias, bias, &one, p.y, y), "cudnnAddTensor", s);
}

void CudnnConv::backward_input(const Conv2dShape& s, const float* dy, const float* w, float* dx,
                               const WorkspaceFn& workspace) {
  ShapePlan& p = state_->plan_for(s);
  const auto& algo = state_->backward_data_algo(p, s);
  void* scratch = workspace_for(algo.workspace_bytes, workspace, s);
  const float one = 1.f, zero = 0.f;
  check(cudnnConvolutionBackwardData(state_->handle, &one, p.w, w, p.y, dy, p.conv_backward_data,
                                     algo.algo, scratch, algo.workspace_bytes, &zero, p.x, dx),
        "cudnnConvolutionBackwardData", s);
}

void CudnnConv::backward_weight(const Conv2dShape& s, const float* dy, const float* x, float* dw,
                                float* dbias, const WorkspaceFn& workspace) {
  ShapePlan& p = state_->plan_for(s);
  const auto& algo = state_->backward_filter_algo(p, s);
  void* scratch = workspace_for(algo.workspace_bytes, workspace, s);
  const float one = 1.f;  // beta = 1: gradients accumulate over micro-batches
  check(
      cudnnConvolutionBackwardFilter(state_->handle, &one, p.x, x, p.y, dy, p.conv_backward_filter,
                                     algo.algo, scratch, algo.workspace_bytes, &one, p.w, dw),
      "cudnnConvolutionBackwardFilter", s);
  if (dbias)
    check(cudnnConvolutionBackwardBias(state_->handle, &one, p.y, dy, &one, p.bias, dbias),
          "cudnnConvolutionBackwardBias", s);
}

}  // namespace pt::cuda
