#include "compute/cuda/gemm.hpp"

#include <fmt/format.h>

namespace trident {
namespace {

cublasOperation_t op(bool t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }

// Largest power of two (at most 256) dividing the address.
std::uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t al = 256;
  while (al > 2 && a % al != 0) al /= 2;
  return al;
}

}  // namespace

Gemms::Gemms(cudaStream_t stream, bool allow_tf32, const CudaSite& site)
    : stream_(stream),
      site_(site),
      tf32_(allow_tf32),
      compute_(allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F) {
  cublas_check(cublasCreate(&blas_), site_, "cublasCreate");
  cublas_check(cublasSetStream(blas_, stream_), site_, "cublasSetStream");
  // One workspace owned by us, shared by cuBLAS and cuBLASLt: both run on
  // this stream, one call after another, and a fixed workspace keeps cuBLAS's
  // choice of algorithm (hence the bits) the same from run to run.
  cuda_check(cudaMalloc(&workspace_, workspace_bytes_), site_, "cudaMalloc (GEMM workspace)");
  cublas_check(cublasSetWorkspace(blas_, workspace_, workspace_bytes_), site_, "cublasSetWorkspace");
  cublas_check(cublasLtCreate(&lt_), site_, "cublasLtCreate");
}

Gemms::~Gemms() {
  for (auto& [key, p] : plans_) {
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.d) cublasLtMatrixLayoutDestroy(p.d);
    if (p.desc) cublasLtMatmulDescDestroy(p.desc);
  }
  if (lt_) cublasLtDestroy(lt_);
  if (blas_) cublasDestroy(blas_);
  if (workspace_) cudaFree(workspace_);
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the
// operands, keep each one's transpose flag.
void Gemms::gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  cublas_check(cublasGemmEx(blas_, op(tb), op(ta), N, M, K, &alpha, B, CUDA_R_32F, ldb, A,
                            CUDA_R_32F, lda, &beta, C, CUDA_R_32F, ldc, compute_,
                            CUBLAS_GEMM_DEFAULT),
               site_, "cublasGemmEx");
}

void Gemms::gemm_bf16(bool ta, bool tb, int M, int N, int K, const std::uint16_t* A, int lda,
                      const std::uint16_t* B, int ldb, float beta, float* C, int ldc) {
  const float alpha = 1.0f;
  cublas_check(cublasGemmEx(blas_, op(tb), op(ta), N, M, K, &alpha, B, CUDA_R_16BF, ldb, A,
                            CUDA_R_16BF, lda, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
               site_, "cublasGemmEx (bf16)");
}

void Gemms::gemm_strided(bool ta, bool tb, int M, int N, int K, float alpha, const float* A,
                         int lda, long long sa, const float* B, int ldb, long long sb, float beta,
                         float* C, int ldc, long long sc, int count) {
  cublas_check(cublasGemmStridedBatchedEx(blas_, op(tb), op(ta), N, M, K, &alpha, B, CUDA_R_32F,
                                          ldb, sb, A, CUDA_R_32F, lda, sa, &beta, C, CUDA_R_32F,
                                          ldc, sc, count, compute_, CUBLAS_GEMM_DEFAULT),
               site_, "cublasGemmStridedBatchedEx");
}

void Gemms::gemm_strided(bool ta, bool tb, int M, int N, int K, float alpha,
                              const std::uint16_t* A, int lda, long long sa,
                              const std::uint16_t* B, int ldb, long long sb, float beta, float* C,
                              int ldc, long long sc, int count) {
  cublas_check(cublasGemmStridedBatchedEx(blas_, op(tb), op(ta), N, M, K, &alpha, B, CUDA_R_16BF,
                                          ldb, sb, A, CUDA_R_16BF, lda, sa, &beta, C, CUDA_R_32F,
                                          ldc, sc, count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               site_, "cublasGemmStridedBatchedEx (bf16)");
}

// Column-major view: D (OC x N, ld OC) = op(A) B with A the weight buffer seen
// as IC x OC (ld IC), transposed; B the input as IC x N (ld IC).
Gemms::LtPlan& Gemms::plan(const LtKey& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  const auto [N, IC, OC, has_bias, align, bf16, bf16_out] = key;
  LtPlan& p = plans_[key];
  const char* what = "cuBLASLt matmul set-up";
  cublas_check(cublasLtMatmulDescCreate(&p.desc, bf16 ? CUBLAS_COMPUTE_32F : compute_, CUDA_R_32F),
               site_, what);
  const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
  cublas_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t),
               site_, what);
  cublas_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n),
               site_, what);
  const cublasLtEpilogue_t epi = has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  cublas_check(
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
      site_, what);
  const cudaDataType_t operand = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  cublas_check(cublasLtMatrixLayoutCreate(&p.a, operand, IC, OC, IC), site_, what);
  cublas_check(cublasLtMatrixLayoutCreate(&p.b, operand, IC, N, IC), site_, what);
  cublas_check(cublasLtMatrixLayoutCreate(&p.d, bf16_out ? CUDA_R_16BF : CUDA_R_32F, OC, N, OC),
               site_, what);
  cublasLtMatmulPreference_t pref = nullptr;
  cublas_check(cublasLtMatmulPreferenceCreate(&pref), site_, what);
  cublas_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &workspace_bytes_, sizeof workspace_bytes_),
               site_, what);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    cublas_check(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof align), site_,
                 what);
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt_, p.desc, p.a, p.b, p.d, p.d, pref,
                                                          1, &result, &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  p.found = s == CUBLAS_STATUS_SUCCESS && returned > 0;
  if (p.found) p.algo = result.algo;
  return p;
}

bool Gemms::linear(float* out, const float* inp, const float* w, const float* bias, int N, int IC,
                   int OC) {
  return run_linear(out, inp, w, bias, N, IC, OC, false, false);
}

bool Gemms::linear_bf16(float* out, const std::uint16_t* inp, const std::uint16_t* w,
                        const float* bias, int N, int IC, int OC) {
  return run_linear(out, inp, w, bias, N, IC, OC, true, false);
}

bool Gemms::linear_bf16_out(std::uint16_t* out, const std::uint16_t* inp, const std::uint16_t* w,
                            const std::uint16_t* bias, int N, int IC, int OC) {
  return run_linear(out, inp, w, bias, N, IC, OC, true, true);
}

bool Gemms::run_linear(void* out, const void* inp, const void* w, const void* bias, int N, int IC,
                       int OC, bool bf16, bool bf16_out) {
  std::uint32_t align = std::min(std::min(alignment(out), alignment(inp)), alignment(w));
  if (bias) align = std::min(align, alignment(bias));
  LtPlan& p = plan(LtKey{N, IC, OC, bias != nullptr, align, bf16, bf16_out});
  if (!p.found) return false;
  if (bias)
    cublas_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                sizeof bias),
                 site_, "cuBLASLt bias");
  const float one = 1.0f, zero = 0.0f;
  cublas_check(cublasLtMatmul(lt_, p.desc, &one, w, p.a, inp, p.b, &zero, out, p.d, out, p.d,
                              &p.algo, workspace_, workspace_bytes_, stream_),
               site_, "cublasLtMatmul");
  return true;
}

std::string Gemms::describe() const {
  int version = 0;
  cublas_check(cublasGetVersion(blas_, &version), site_, "cublasGetVersion");
  return fmt::format("cuBLAS {}.{}.{}, {} GEMMs (bf16 tensor-core for bf16 operands)",
                     version / 10000, (version / 100) % 100, version % 100,
                     tf32_ ? "TF32 tensor-core" : "fp32");
}

}  // namespace trident
