#pragma once
// Row-major GEMM on cuBLASLt for the CUDA backend, with the semantics of pt::Backend::gemm:
// C(M,N) = alpha * op(A)(M,K) * op(B)(K,N) + beta * C, lda/ldb/ldc the row strides as stored.
// Inside the plugin only.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>

namespace pt::cuda {

// fp32: fp32 operands, fp32 math (CUBLAS_COMPUTE_32F).
// tf32: fp32 operands rounded to tf32 by the tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32).
// bf16: the caller's bf16 copies of A and B, fp32 accumulation, fp32 C (CUBLAS_COMPUTE_32F).
enum class GemmPrecision { fp32, tf32, bf16 };

const char* precision_name(GemmPrecision precision);

// The column-major GEMM that computes a row-major one. A row-major (R x C) matrix with row stride
// ld is, read column-major, its transpose (C x R) with leading dimension ld. So the row-major
// C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T: the first operand is B, the second
// is A, m = N, n = M, and each operand keeps its own transpose flag. Nothing is materialised.
struct ColumnMajorGemm {
  bool trans_first, trans_second;     // op of the first (B) and second (A) operand
  int64_t m, n, k;                    // C^T is m x n, the reduction runs over k
  int64_t ld_first, ld_second, ld_c;  // column strides of B, A and C as cuBLAS sees them
  bool first_is_b;                    // always true: documents the swap
};

// Pure (no CUDA calls), so the swap is unit tested on the CPU.
ColumnMajorGemm to_column_major(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                                int64_t lda, int64_t ldb, int64_t ldc);

// One cuBLASLt handle, queueing on one stream with one workspace. Descriptors, layouts and the
// heuristic's algorithm are cached per shape, so a repeated shape costs one cublasLtMatmul call.
// Not thread-safe: one instance per stream, driven by one host thread at a time. Create it with
// the stream's device current.
// cuBLASLt has no algorithm for a shape (and precision, epilogue, alignment): nothing was queued,
// so the caller may fall back to another way (e.g. without the bias epilogue).
class LtNoAlgorithm : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class LtGemm {
 public:
  // `workspace` is device memory of `workspace_bytes` (null with 0 is allowed: then only
  // algorithms without workspace), owned by the caller and outliving this object, 256-byte
  // aligned as cuBLAS asks of workspaces (cudaMalloc's alignment). Throws std::runtime_error with
  // the cuBLAS status when the handle cannot be created.
  LtGemm(cudaStream_t stream, void* workspace, size_t workspace_bytes);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // C(M,N) = alpha * op(A)(M,K) * op(B)(K,N) + beta * C, row-major, queued on the stream. beta 0
  // overwrites C without reading it. With GemmPrecision::bf16, a_bf16 / b_bf16 are bf16 copies
  // (uint16_t bits) of A and B with the same layout and strides, and A / B are not read;
  // otherwise they are ignored (pass null).
  //
  // M or N == 0 does nothing. K == 0 is the caller's job (C = beta * C, no product): it throws
  // std::invalid_argument, as do negative sizes, strides below the row lengths and missing bf16
  // operands. cuBLAS failures (no algorithm for the shape, a failed launch) throw
  // std::runtime_error naming the shape, the precision and the cuBLAS status.
  //
  // `bias` (N floats, or null): added to every row of the product inside the GEMM (cuBLASLt's
  // bias epilogue), i.e. C = alpha op(A) op(B) + beta C + bias.
  void gemm(GemmPrecision precision, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
            float alpha, const float* A, const uint16_t* a_bf16, int64_t lda, const float* B,
            const uint16_t* b_bf16, int64_t ldb, float beta, float* C, int64_t ldc,
            const float* bias = nullptr);

  // Shapes planned so far (for tests and diagnostics).
  size_t cached_plans() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace pt::cuda
