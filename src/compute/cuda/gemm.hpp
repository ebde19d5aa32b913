// The backend's GEMMs: cuBLAS for general and strided-batched products (in
// the CPU backend's row-major convention, so the CUDA code mirrors cpu::gemm
// call for call) and cuBLASLt for the linear layer's forward, with the bias
// added in the GEMM's epilogue. fp32, with TF32 tensor cores only when the
// deck sets system.allow_tf32; bf16 tensor cores with fp32 sums for products
// whose operands both come as bf16 (gemm_bf16).
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "compute/cuda/cuda_check.hpp"

namespace trident {

class Gemms {
 public:
  Gemms(cudaStream_t stream, bool allow_tf32, const CudaSite& site);
  ~Gemms();
  Gemms(const Gemms&) = delete;
  Gemms& operator=(const Gemms&) = delete;

  // Row-major C = alpha op(A) op(B) + beta C, op(A) M x K, op(B) K x N.
  void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
            const float* B, int ldb, float beta, float* C, int ldc);
  // The same product of bf16 matrices, alpha 1, fp32 sums and C (bf16 x bf16
  // products are exact in fp32: the f32 GEMM of the same values up to order).
  void gemm_bf16(bool ta, bool tb, int M, int N, int K, const std::uint16_t* A, int lda,
                 const std::uint16_t* B, int ldb, float beta, float* C, int ldc);
  // `count` products of bf16 matrices, as gemm_strided (fp32 sums and C).
  void gemm_strided(bool ta, bool tb, int M, int N, int K, float alpha,
                         const std::uint16_t* A, int lda, long long sa, const std::uint16_t* B,
                         int ldb, long long sb, float beta, float* C, int ldc, long long sc,
                         int count);
  // `count` such products; operand i starts at A + i sa, B + i sb, C + i sc.
  void gemm_strided(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                    long long sa, const float* B, int ldb, long long sb, float beta, float* C,
                    int ldc, long long sc, int count);
  // out (N, OC) = inp (N, IC) w^T (+ bias) through cuBLASLt. Returns false
  // when cuBLASLt offers no algorithm for the shape (the caller falls back).
  bool linear(float* out, const float* inp, const float* w, const float* bias, int N, int IC,
              int OC);
  // The same of bf16 operands (fp32 sums, out and bias): the bias in the
  // epilogue instead of a pass over out.
  bool linear_bf16(float* out, const std::uint16_t* inp, const std::uint16_t* w,
                   const float* bias, int N, int IC, int OC);
  // The same with out as bf16 (the f32 sums plus bias rounded in the
  // epilogue) and a bf16 bias, as cuBLASLt takes it with a bf16 output.
  bool linear_bf16_out(std::uint16_t* out, const std::uint16_t* inp, const std::uint16_t* w,
                       const std::uint16_t* bias, int N, int IC, int OC);
  std::string describe() const;

 private:
  struct LtPlan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool found = false;
  };
  // N, IC, OC, has bias, alignment of the pointers (the heuristic depends on
  // it), bf16 operands, bf16 output (and bias).
  using LtKey = std::tuple<int, int, int, bool, std::uint32_t, bool, bool>;
  LtPlan& plan(const LtKey& key);
  bool run_linear(void* out, const void* inp, const void* w, const void* bias, int N, int IC,
                  int OC, bool bf16, bool bf16_out);

  cudaStream_t stream_;
  CudaSite site_;
  bool tf32_;
  cublasComputeType_t compute_;
  cublasHandle_t blas_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = std::size_t(32) << 20;
  std::map<LtKey, LtPlan> plans_;
};

}  // namespace trident
