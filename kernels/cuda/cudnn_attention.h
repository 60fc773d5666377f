#pragma once
// Causal flash attention through cuDNN's fused engine, reached by the backend graph API
// (kernels/cuda/cudnn_graph.h): the graph below is the pattern of the cuDNN frontend's composite
// SDPA node (Q·Kᵀ, scale, causal mask, softmax with its log-sum-exp statistics, P·V; and its
// backward), built once per shape and cached. Inside the plugin only.
//
// Layouts are the backend's (engine/core/backend.h), in bf16 (bits as uint16_t):
//   qkv (B, T, 3, H, Dh), out (B, T, H, Dh), lse (B, H, T) fp32, dqkv (B, T, 3, H, Dh).
// Q, K and V are strided views of qkv (no copies); the log-sum-exp is exactly the backend's lse.
#include <cuda_runtime_api.h>
#include <cudnn_graph.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "kernels/cuda/cudnn_graph.h"
#include "kernels/cuda/workspace.h"

namespace pt::cuda {

// The uids an attention graph's execution binds (0: not in this graph).
struct AttentionUids {
  int64_t q = 0, k = 0, v = 0, o = 0, lse = 0;  // forward and backward
  int64_t d_o = 0, dq = 0, dk = 0, dv = 0;      // backward
  int64_t softmax_sum = 0, dq_accumulator = 0;  // backward: fp32 scratch, not virtual
  int64_t scratch_bytes = 0;                    // those two, after the plan's workspace
};

// The graph of one attention call (forward, or backward fast or deterministic) and its uids:
// what CudnnAttention builds its plans from. Public so that a machine without a GPU can check
// it: cuDNN validates every tensor and op, and finalizes the operation graph, without a handle
// (tests/cuda_math/cudnn_attention_graph_test.cpp); choosing an engine needs the GPU.
struct AttentionGraph {
  cudnn_graph::Graph graph;
  AttentionUids ids;
};
AttentionGraph attention_graph(bool backward, bool deterministic, int64_t B, int64_t T, int64_t H,
                               int64_t Dh, float scale);

class CudnnAttention {
 public:
  // One cuDNN handle queueing on `stream`; create it with the stream's device current. Throws
  // cudnn_graph::Refused when the handle cannot be created.
  explicit CudnnAttention(cudaStream_t stream);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Why cuDNN's fused engine cannot take this shape, or "" when it may (the engine decides
  // at the first call): the head dimension must be a multiple of 8 and at most 128.
  static std::string unsupported_shape(int64_t Dh);
  // The cuDNN library loaded at run time, as a number (9.19.0 = 91900).
  static size_t version();

  // out = attention(qkv), lse = its log-sum-exp. Builds the plan on the first call for a shape;
  // throws cudnn_graph::Refused when cuDNN refuses it (nothing is queued then).
  void forward(const uint16_t* qkv, uint16_t* out, float* lse, int64_t B, int64_t T, int64_t H,
               int64_t Dh, float scale, const WorkspaceFn& workspace);
  // dqkv = the gradient for dout, overwriting all of it. `deterministic` builds the graph whose
  // dQ is written by one matmul (no fp32 accumulator updated from several thread blocks) and
  // takes only engines that cuDNN does not mark non-deterministic.
  void backward(const uint16_t* qkv, const uint16_t* out, const uint16_t* dout, const float* lse,
                uint16_t* dqkv, int64_t B, int64_t T, int64_t H, int64_t Dh, float scale,
                bool deterministic, const WorkspaceFn& workspace);

 private:
  struct Cached;
  // (backward?, deterministic?, B, T, H, Dh, scale bits)
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, uint32_t>;
  Cached& plan(const Key& key);

  cudaStream_t stream_;
  cudnnHandle_t handle_ = nullptr;
  std::map<Key, std::unique_ptr<Cached>> plans_;
};

}  // namespace pt::cuda
