// Row-major GEMM on cuBLASLt.
//
// cuBLASLt is column-major; a row-major matrix read column-major is its transpose, so the
// row-major C = op(A) op(B) runs as the column-major C^T = op(B)^T op(A)^T (to_column_major):
// operands swapped, M and N swapped, transpose flags kept, no data moved. C is also D (in place,
// one layout for both), so beta 0 overwrites and beta 1 accumulates.
//
// Everything cuBLASLt needs besides the pointers (the matmul descriptor, three layouts and the
// algorithm the heuristic chose) is a "plan", built once per key and cached: the heuristic costs
// tens of microseconds, a cached plan nothing. The key is the shape, the precision and the
// alignment of the three pointers. The alignment is part of it because the heuristic never sees
// the pointers: by default it assumes 256-byte aligned buffers and may pick a vectorised kernel
// that a sub-view of a tensor (an offset pointer) would break. We tell it each pointer's actual
// alignment (the largest power of two dividing the address, at most 256), which is never wrong,
// and a differently aligned call gets its own plan.
//
// Precision: fp32 and tf32 differ only in the compute type; bf16 reads the caller's bf16 copies of
// A and B (CUDA_R_16BF) and keeps C/D, the scale type and the accumulation in fp32, a combination
// cuBLASLt lists among its supported ones (CUBLAS_COMPUTE_32F, scale CUDA_R_32F, A/B CUDA_R_16BF,
// C/D CUDA_R_32F).
#include "kernels/cuda/cublaslt_gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "engine/core/random.h"

namespace pt::cuda {

const char* precision_name(GemmPrecision precision) {
  switch (precision) {
    case GemmPrecision::fp32: return "fp32";
    case GemmPrecision::tf32: return "tf32";
    case GemmPrecision::bf16: return "bf16";
  }
  return "unknown precision";
}

ColumnMajorGemm to_column_major(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                                int64_t lda, int64_t ldb, int64_t ldc) {
  // Row-major B (K x N, or N x K when transposed) read column-major is B^T, exactly the
  // un-transposed first operand op(B)^T needs; likewise for A. So the flags carry over unchanged.
  return ColumnMajorGemm{.trans_first = trans_b,
                         .trans_second = trans_a,
                         .m = N,
                         .n = M,
                         .k = K,
                         .ld_first = ldb,
                         .ld_second = lda,
                         .ld_c = ldc,
                         .first_is_b = true};
}

namespace {

// The heuristic assumes this alignment unless told otherwise, and no algorithm needs more.
constexpr uint32_t kMaxAlignmentBytes = 256;
// Candidates asked of the heuristic; the first usable one (fastest estimate) is kept.
constexpr int kHeuristicCandidates = 8;

uint32_t pointer_alignment(const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  if (address == 0) return kMaxAlignmentBytes;
  const uintptr_t lowest_bit = address & (~address + 1);
  return static_cast<uint32_t>(std::min<uintptr_t>(lowest_bit, kMaxAlignmentBytes));
}

struct PlanKey {
  GemmPrecision precision;
  bool trans_a, trans_b;
  int64_t M, N, K, lda, ldb, ldc;
  uint32_t align_a, align_b, align_c;  // bytes, powers of two up to 256
  bool bias;                           // the bias epilogue (the pointer is set per call)
  uint32_t align_bias;                 // its alignment, which the heuristic reads from the pointer
  bool operator==(const PlanKey&) const = default;
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    uint64_t h = hash_keys(static_cast<uint64_t>(k.precision),
                           (uint64_t{k.trans_a} << 1) | uint64_t{k.trans_b});
    for (int64_t v : {k.M, k.N, k.K, k.lda, k.ldb, k.ldc})
      h = hash_keys(h, static_cast<uint64_t>(v));
    h = hash_keys(h, (uint64_t{k.align_a} << 40) | (uint64_t{k.align_b} << 20) | k.align_c);
    h = hash_keys(h, (uint64_t{k.bias} << 32) | k.align_bias);
    return static_cast<size_t>(h);
  }
};

std::string describe(const PlanKey& k) {
  auto s = [](int64_t v) { return std::to_string(v); };
  return std::string("cuBLASLt gemm (") + precision_name(k.precision) +
         ", trans_a=" + (k.trans_a ? "1" : "0") + " trans_b=" + (k.trans_b ? "1" : "0") +
         ", M=" + s(k.M) + " N=" + s(k.N) + " K=" + s(k.K) + ", lda=" + s(k.lda) +
         " ldb=" + s(k.ldb) + " ldc=" + s(k.ldc) + ", pointer alignment A " + s(k.align_a) + " B " +
         s(k.align_b) + " C " + s(k.align_c) + " bytes" + (k.bias ? ", bias epilogue" : "") + ")";
}

std::string status_text(cublasStatus_t status) {
  const char* name = cublasLtGetStatusName(status);
  return std::string(name ? name : "unknown cuBLAS status") + " (" +
         std::to_string(static_cast<int>(status)) + ")";
}

void check(cublasStatus_t status, const char* call, const PlanKey& key) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(describe(key) + ": " + call + " failed with " + status_text(status));
}

// The descriptors of one key; destroys what it holds, so a half-built plan cleans up too.
struct Plan {
  cublasLtMatmulDesc_t matmul = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (c) (void)cublasLtMatrixLayoutDestroy(c);
    if (second) (void)cublasLtMatrixLayoutDestroy(second);
    if (first) (void)cublasLtMatrixLayoutDestroy(first);
    if (matmul) (void)cublasLtMatmulDescDestroy(matmul);
  }
};

// Owns a heuristic preference for the duration of one plan build.
class Preference {
 public:
  explicit Preference(const PlanKey& key) {
    check(cublasLtMatmulPreferenceCreate(&pref_), "cublasLtMatmulPreferenceCreate", key);
  }
  ~Preference() {
    if (pref_) (void)cublasLtMatmulPreferenceDestroy(pref_);
  }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;

  template <class T>
  void set(cublasLtMatmulPreferenceAttributes_t attr, T value, const PlanKey& key) {
    check(cublasLtMatmulPreferenceSetAttribute(pref_, attr, &value, sizeof(value)),
          "cublasLtMatmulPreferenceSetAttribute", key);
  }
  cublasLtMatmulPreference_t get() const { return pref_; }

 private:
  cublasLtMatmulPreference_t pref_ = nullptr;
};

}  // namespace

struct LtGemm::State {
  cublasLtHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans;

  ~State() {
    plans.clear();
    if (handle) (void)cublasLtDestroy(handle);
  }

  const Plan& plan_for(const PlanKey& key, const float* bias);
};

const Plan& LtGemm::State::plan_for(const PlanKey& key, const float* bias) {
  if (auto it = plans.find(key); it != plans.end()) return *it->second;

  const ColumnMajorGemm cm =
      to_column_major(key.trans_a, key.trans_b, key.M, key.N, key.K, key.lda, key.ldb, key.ldc);
  const bool bf16 = key.precision == GemmPrecision::bf16;
  const cublasComputeType_t compute =
      key.precision == GemmPrecision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaDataType_t operand_type = bf16 ? CUDA_R_16BF : CUDA_R_32F;

  auto plan = std::make_unique<Plan>();
  check(cublasLtMatmulDescCreate(&plan->matmul, compute, CUDA_R_32F), "cublasLtMatmulDescCreate",
        key);
  const int32_t op_first = cm.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int32_t op_second = cm.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(plan->matmul, CUBLASLT_MATMUL_DESC_TRANSA, &op_first,
                                       sizeof(op_first)),
        "cublasLtMatmulDescSetAttribute(TRANSA)", key);
  check(cublasLtMatmulDescSetAttribute(plan->matmul, CUBLASLT_MATMUL_DESC_TRANSB, &op_second,
                                       sizeof(op_second)),
        "cublasLtMatmulDescSetAttribute(TRANSB)", key);
  if (key.bias) {
    // In the column-major view D^T is N x M: the bias runs along its rows (one per output
    // feature), which is how the epilogue broadcasts a vector of length m.
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    check(cublasLtMatmulDescSetAttribute(plan->matmul, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                         sizeof(epilogue)),
          "cublasLtMatmulDescSetAttribute(EPILOGUE)", key);
    const cudaDataType_t bias_type = CUDA_R_32F;
    check(cublasLtMatmulDescSetAttribute(plan->matmul, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                         &bias_type, sizeof(bias_type)),
          "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)", key);
    // The heuristic reads the bias pointer's alignment: give it this call's (same key, same
    // alignment for later calls).
    check(cublasLtMatmulDescSetAttribute(plan->matmul, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                         sizeof(bias)),
          "cublasLtMatmulDescSetAttribute(BIAS_POINTER)", key);
  }

  // Layouts describe the operands as stored (before op): m x k, or k x m when transposed.
  auto rows = [](bool trans, int64_t r, int64_t c) { return static_cast<uint64_t>(trans ? c : r); };
  auto cols = [](bool trans, int64_t r, int64_t c) { return static_cast<uint64_t>(trans ? r : c); };
  check(cublasLtMatrixLayoutCreate(&plan->first, operand_type, rows(cm.trans_first, cm.m, cm.k),
                                   cols(cm.trans_first, cm.m, cm.k), cm.ld_first),
        "cublasLtMatrixLayoutCreate(B)", key);
  check(cublasLtMatrixLayoutCreate(&plan->second, operand_type, rows(cm.trans_second, cm.k, cm.n),
                                   cols(cm.trans_second, cm.k, cm.n), cm.ld_second),
        "cublasLtMatrixLayoutCreate(A)", key);
  check(cublasLtMatrixLayoutCreate(&plan->c, CUDA_R_32F, static_cast<uint64_t>(cm.m),
                                   static_cast<uint64_t>(cm.n), cm.ld_c),
        "cublasLtMatrixLayoutCreate(C)", key);

  // The first operand is B and the second A: their alignments follow the swap.
  Preference pref(key);
  pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(workspace_bytes), key);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b, key);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a, key);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c, key);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c, key);

  cublasLtMatmulHeuristicResult_t results[kHeuristicCandidates] = {};
  int returned = 0;
  check(
      cublasLtMatmulAlgoGetHeuristic(handle, plan->matmul, plan->first, plan->second, plan->c,
                                     plan->c, pref.get(), kHeuristicCandidates, results, &returned),
      "cublasLtMatmulAlgoGetHeuristic", key);
  const auto usable = std::find_if(results, results + returned, [&](const auto& r) {
    return r.state == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= workspace_bytes;
  });
  if (usable == results + returned)
    throw LtNoAlgorithm(
        describe(key) + ": cublasLtMatmulAlgoGetHeuristic found no algorithm within " +
        std::to_string(workspace_bytes) + " bytes of workspace (" + std::to_string(returned) +
        " candidates" +
        (returned > 0 ? ", the first with state " + status_text(results[0].state) : "") + ")");
  plan->algo = usable->algo;

  return *plans.emplace(key, std::move(plan)).first->second;
}

LtGemm::LtGemm(cudaStream_t stream, void* workspace, size_t workspace_bytes)
    : state_(std::make_unique<State>()) {
  if (workspace == nullptr && workspace_bytes != 0)
    throw std::invalid_argument("LtGemm: null workspace with workspace_bytes = " +
                                std::to_string(workspace_bytes));
  state_->stream = stream;
  state_->workspace = workspace;
  state_->workspace_bytes = workspace_bytes;
  const cublasStatus_t status = cublasLtCreate(&state_->handle);
  if (status != CUBLAS_STATUS_SUCCESS) {
    state_->handle = nullptr;
    throw std::runtime_error("cuBLASLt: cublasLtCreate failed with " + status_text(status));
  }
}

LtGemm::~LtGemm() = default;

size_t LtGemm::cached_plans() const { return state_->plans.size(); }

void LtGemm::gemm(GemmPrecision precision, bool trans_a, bool trans_b, int64_t M, int64_t N,
                  int64_t K, float alpha, const float* A, const uint16_t* a_bf16, int64_t lda,
                  const float* B, const uint16_t* b_bf16, int64_t ldb, float beta, float* C,
                  int64_t ldc, const float* bias) {
  const bool bf16 = precision == GemmPrecision::bf16;
  const void* a_data = bf16 ? static_cast<const void*>(a_bf16) : static_cast<const void*>(A);
  const void* b_data = bf16 ? static_cast<const void*>(b_bf16) : static_cast<const void*>(B);
  const PlanKey key{precision,
                    trans_a,
                    trans_b,
                    M,
                    N,
                    K,
                    lda,
                    ldb,
                    ldc,
                    pointer_alignment(a_data),
                    pointer_alignment(b_data),
                    pointer_alignment(C),
                    bias != nullptr,
                    bias != nullptr ? pointer_alignment(bias) : 0};

  if (M < 0 || N < 0 || K < 0) throw std::invalid_argument(describe(key) + ": negative size");
  if (M == 0 || N == 0) return;
  if (K == 0)  // cuBLASLt has no use for an empty product; the backend scales C itself
    throw std::invalid_argument(describe(key) +
                                ": K == 0 must be handled by the caller (C = beta * C)");
  // Row strides as stored: A is (M,K) or, transposed, (K,M); B is (K,N) or (N,K).
  const int64_t a_cols = trans_a ? M : K, b_cols = trans_b ? K : N;
  if (lda < a_cols || ldb < b_cols || ldc < N)
    throw std::invalid_argument(
        describe(key) + ": row stride too small (lda needs >= " + std::to_string(a_cols) +
        ", ldb >= " + std::to_string(b_cols) + ", ldc >= " + std::to_string(N) + ")");
  if (bf16 && (a_bf16 == nullptr || b_bf16 == nullptr))
    throw std::invalid_argument(describe(key) +
                                ": bf16 precision needs the bf16 copies of A and B");

  const Plan& plan = state_->plan_for(key, bias);
  if (bias != nullptr)  // the pointer changes per call; the plan is shared
    check(cublasLtMatmulDescSetAttribute(plan.matmul, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                         sizeof(bias)),
          "cublasLtMatmulDescSetAttribute(BIAS_POINTER)", key);
  // Column-major C^T = op(B)^T op(A)^T: B goes first. C is both input and output (in place).
  check(cublasLtMatmul(state_->handle, plan.matmul, &alpha, b_data, plan.first, a_data, plan.second,
                       &beta, C, plan.c, C, plan.c, &plan.algo, state_->workspace,
                       state_->workspace_bytes, state_->stream),
        "cublasLtMatmul", key);
}

}  // namespace pt::cuda
