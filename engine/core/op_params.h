#pragma once
// The parameters of the Backend's ops (engine/core/backend.h): activation kinds, convolution and
// pooling shapes, optimizer hyper-parameters, and the arithmetic a device's GEMMs use. Plain
// values that layers, the optimizer and every backend share.
#include <cstdint>

namespace pt {

enum class Activation { relu, gelu_tanh, gelu_erf, tanh };

// NCHW input (N, C, H, W), weights (K, C, R, S), output (N, K, P, Q).
struct Conv2dShape {
  int64_t N, C, H, W;
  int64_t K, R, S;
  int64_t stride_h, stride_w, pad_h, pad_w;
  int64_t P, Q;
};

// NCHW input (N, C, H, W) -> (N, C, P, Q), window R x S. Average pooling counts padding
// (PyTorch's default count_include_pad=true).
struct Pool2dShape {
  int64_t N, C, H, W;
  int64_t R, S;
  int64_t stride_h, stride_w, pad_h, pad_w;
  int64_t P, Q;
};

// PyTorch SGD semantics: g = grad + wd*p; buf = momentum*buf + (1-dampening)*g (buf = g on the
// first step); g = nesterov ? g + momentum*buf : buf; p -= lr*g.
struct SgdParams {
  float lr = 0.01f, momentum = 0.f, dampening = 0.f, weight_decay = 0.f;
  bool nesterov = false;
  bool first_step = true;  // momentum buffer is initialised from g instead of accumulated
};

// PyTorch AdamW semantics: p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
// p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps), t = step (1-based).
// nesterov: the step looks one momentum step ahead (Dozat 2016, "Incorporating Nesterov
// Momentum into Adam"): p -= (lr b1 m / (1-b1^(t+1)) + lr (1-b1) g / (1-b1^t)) / (sqrt(v /
// (1-b2^t)) + eps), m and v as above. For a gradient one step late (an asynchronous pipeline's
// delayed stages) it adds at once what the delay withheld, as Nesterov's form does for SGD.
struct AdamWParams {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 1e-2f;
  int64_t step = 1;
  bool nesterov = false;
};

// The slice [first, first + count) of a vocabulary of `total` token ids (or classes) that one
// tensor-parallel rank holds: a vocab-parallel embedding's rows of the table, a vocab-parallel
// LM head's columns of the logits (layers/tensor_parallel/). Ids and labels stay global
// (in [0, total)); the ops subtract `first` themselves.
struct VocabRange {
  int64_t first = 0, count = 0, total = 0;
};

// What softmax_partials writes for each row of a slice of the classes (Backend, losses), in
// this order, kSoftmaxPartialFloats floats a row: all floats so that one all-gather of float
// buffers carries them between ranks.
//   max      the slice's largest logit (NaNs ignored; -inf when it has no number)
//   sum_exp  sum over the slice of exp(z - max) (0 when max is -inf, so that an all -inf slice
//            adds nothing after rescaling)
//   label_z  the label's logit when the label lies in the slice, else 0 (exactly one slice
//            holds it, so the sum over slices is the label's logit, exactly)
//   argmax   the global index of the slice's first maximum (first when it has no number), as
//            a float: exact below 2^24, which the ops check against `total`
inline constexpr int64_t kSoftmaxPartialFloats = 4;
inline constexpr int64_t kSoftmaxMaxIndex = 1 << 24;  // floats hold every integer below

// What softmax_combine returns (host values) for the rows of the combined partials.
struct SoftmaxTotals {
  double loss_sum = 0;  // sum over rows of -log softmax(z)[label]
  int64_t correct = 0;  // rows whose whole-row arg-max (first maximum) is the label
};

// Arithmetic of a device's GEMMs (and convolutions); weights, gradients and optimizer state stay
// fp32 in every mode. Backends that compute only in fp32 refuse the others when opened.
// Values match PtCudaPrecision (engine/cuda/plugin_abi.h).
enum class Precision { fp32 = 0, tf32 = 1, bf16 = 2 };

// Which causal-attention kernel a device runs (--attention). automatic: cuDNN's fused flash
// attention where the device has it, the precision is bf16 and the shape suits it, else the
// backend's own kernel; native: always the backend's own; cudnn: cuDNN's or a clear error;
// cudnn_deterministic: cuDNN's with a backward that gives the same bits every run. Backends
// without cuDNN (the CPU) refuse the last two when opened. Values match PtCudaAttention.
enum class AttentionKernel { automatic = 0, native = 1, cudnn = 2, cudnn_deterministic = 3 };

// The --attention spelling: "auto" | "native" | "cudnn" | "cudnn-deterministic".
constexpr const char* attention_name(AttentionKernel a) {
  switch (a) {
    case AttentionKernel::native: return "native";
    case AttentionKernel::cudnn: return "cudnn";
    case AttentionKernel::cudnn_deterministic: return "cudnn-deterministic";
    default: return "auto";
  }
}
// Whether `a` insists on cuDNN (an error where cuDNN cannot run, rather than the native kernel).
constexpr bool requires_cudnn(AttentionKernel a) {
  return a == AttentionKernel::cudnn || a == AttentionKernel::cudnn_deterministic;
}

}  // namespace pt
