// CUDA backend of the compute seam: one device, one compute stream (every op
// is enqueued on it in call order), cuBLAS/cuBLASLt GEMMs and Trident's own
// kernels (launch.hpp). Memory is plain cudaMalloc (never managed memory).
// Host-visible results (copy_to_host, sum_squares) synchronise the stream;
// everything else is asynchronous. The collectives for device buffers (NCCL,
// host-staged MPI) order themselves after this stream with CUDA events. Every
// GPU it runs on has bf16 tensor cores: it is its own Bf16Operands.
#pragma once
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "compute/backend.hpp"
#include "compute/bf16_operands.hpp"
#include "compute/llama_ops.hpp"
#include "compute/cuda/cuda_check.hpp"
#include "compute/cuda/gemm.hpp"
#include "compute/cuda/kernel_timer.hpp"
#include "compute/cuda/launch.hpp"

namespace trident {

struct CudaBackendOptions {
  int device = 0;
  int rank = 0;               // world rank, for error messages
  bool allow_tf32 = false;    // system.allow_tf32
  bool time_kernels = false;  // per-op device times (TRIDENT_KERNEL_TIMES=1)
};

class CudaBackend final : public ComputeBackend,
                          public Bf16Operands,
                          public LlamaOps,
                          public BackendInfo {
 public:
  explicit CudaBackend(const CudaBackendOptions& options);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  BackendInfo& info() override { return *this; }
  Bf16Operands* bf16_operands() override { return this; }
  LlamaOps& llama_ops() override { return *this; }
  std::string name() const override { return "cuda"; }
  bool memory_is_host() const override { return false; }
  std::string describe() const override;
  double peak_flops(DType dtype) const override;
  std::string peak_source(DType dtype) const override;
  std::string kernel_report() override { return timer_.report(); }
  void reset_kernel_times() override { timer_.reset(); }
  cudaStream_t stream() const { return stream_; }
  const CudaSite& site() const { return site_; }

  void* allocate(std::size_t bytes) override;
  // The op scratch and the operand copies (bf16 bits of f32 values, f32
  // values of bits) the backend holds; they only grow, so this is the peak.
  std::size_t kernel_scratch_peak() const override {
    return scratch_bytes_ + widen_bytes_[0] + widen_bytes_[1] + widen_bytes_[2] +
           adamw_plan_bytes_;
  }
  void release(void* p, std::size_t bytes) override;
  void pin_host(void* host, std::size_t bytes) override;
  void unpin_host(void* host, std::size_t bytes) override;
  void zero(void* p, std::size_t bytes) override;
  void copy_to_host(void* host, const void* dev, std::size_t bytes) override;
  void copy_from_host(void* dev, const void* host, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void copy_to_host_async(void* host, const void* dev, std::size_t bytes) override;
  void copy_from_host_async(void* dev, const void* host, std::size_t bytes) override;
  void wait_copies() override;
  void order_background_reads() override;
  void copy_to_host_in_background(void* host, const void* dev, std::size_t bytes) override;
  void copy_2d(float* dst, std::size_t dst_ld, const float* src, std::size_t src_ld,
               std::size_t rows, std::size_t cols) override;
  void synchronize() override;
  void convert(void* dst, DType dst_type, const void* src, DType src_type,
               std::size_t n) override;
  void round_to(float* x, DType type, std::size_t n) override;
  void round_to_bf16(float* dst, std::uint16_t* bits, const float* src, std::size_t n) override;

  void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, int lo,
                         int count, int N, int C) override;
  void embedding_forward_bits(float* out, const std::int32_t* tok, const std::uint16_t* wte,
                              int lo, int count, int N, int C) override;
  void embedding_backward(float* dwte, const float* dout, const std::int32_t* tokens, int lo,
                          int count, int N, int C) override;
  void position_forward(float* out, const float* wpe, int N, int T, int first, int C) override;
  void position_backward(float* dwpe, const float* dout, int N, int T, int first, int C) override;
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                         const float* b, int N, int C) override;
  void layernorm_forward_rounded(float* out, std::uint16_t* bits, float* mean, float* rstd,
                                 const float* inp, const float* w, const float* b, int N,
                                 int C) override;
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                          const float* w, const float* mean, const float* rstd, int N,
                          int C) override;
  // The core's f32 products and attention: MatrixIn's f32 path below.
  void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int N,
                      int IC, int OC) override {
    matmul_forward(out, MatrixIn(inp), MatrixIn(w), bias, N, IC, OC);
  }
  void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                       const float* w, int N, int IC, int OC, InputGrad dinp_mode) override {
    matmul_backward(dinp, dw, dbias, MatrixIn(dout), MatrixIn(inp), MatrixIn(w), N, IC, OC,
                    dinp_mode);
  }
  void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C,
                         int NH) override {
    attention_forward(out, lse, MatrixIn(qkv), B, T, C, NH, false);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                          const float* lse, int B, int T, int C, int NH) override {
    attention_backward(dqkv, MatrixIn(dout), MatrixIn(qkv), out, lse, B, T, C, NH, false);
  }
  // Products whose operands both come as bf16 (bits, or values marked as bf16
  // values, packed first) run on bf16 tensor cores; the others in f32, on
  // values (widened from the bits where only those come).
  void matmul_forward(float* out, MatrixIn inp, MatrixIn w, const float* bias, int N, int IC,
                      int OC) override;
  void matmul_forward_rounded(float* out, std::uint16_t* bits, MatrixIn inp, MatrixIn w,
                              const float* bias, int N, int IC, int OC, bool values) override;
  void matmul_backward(float* dinp, float* dw, float* dbias, MatrixIn dout, MatrixIn inp,
                       MatrixIn w, int N, int IC, int OC, InputGrad dinp_mode) override;
  void attention_forward(float* out, float* lse, MatrixIn qkv, int B, int T, int C, int NH,
                         bool bf16) override;
  void attention_backward(float* dqkv, MatrixIn dout, MatrixIn qkv, const float* out,
                          const float* lse, int B, int T, int C, int NH, bool bf16) override;
  void attention_forward_rounded(float* out, std::uint16_t* bits, float* lse, MatrixIn qkv,
                                 int B, int T, int C, int NH) override;
  void attention_backward_rounded(float* dqkv, std::uint16_t* bits, MatrixIn dout, MatrixIn qkv,
                                  const float* out, const float* lse, int B, int T, int C,
                                  int NH) override;
  void gelu_forward(float* out, const float* inp, std::size_t n) override;
  void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n) override;
  void gelu_forward_rounded(float* out, std::uint16_t* bits, float* inp, std::uint16_t* inp_bits,
                            std::size_t n, DType store) override;
  void gelu_backward_rounded(float* dinp, std::uint16_t* bits, float* inp,
                             const std::uint16_t* inp_bits, float* dout, std::size_t n,
                             DType store) override;
  void add(float* out, const float* a, const float* b, std::size_t n) override;
  void xent_max(float* row_max, const float* logits, int N, int V, int valid) override;
  void xent_sums(float* packed, const float* logits, const float* row_max,
                 const std::int32_t* targets, int lo, int N, int V, int valid) override;
  void xent_stats(float* row_max, float* packed, const float* logits,
                  const std::int32_t* targets, int N, int V, int valid) override;
  void xent_finish(float* losses, float* dlogits, const float* logits, const float* row_max,
                   const float* packed, const std::int32_t* targets, int lo, int N, int V,
                   int valid, float dloss) override;
  void xent_finish_rounded(float* losses, float* dlogits, const float* logits,
                           const float* row_max, const float* packed,
                           const std::int32_t* targets, int lo, int N, int V, int valid,
                           float dloss) override;
  double sum_squares(const float* x, std::size_t n) override;
  void sum_squares_each(const float* const* xs, const std::size_t* ns, std::size_t count,
                        double* out) override;
  void scale(float* x, float s, std::size_t n) override;
  void adamw_spans(float* param, const float* grad, float* m, float* v, const AdamWSpan* spans,
                   std::size_t count, float lr, float beta1, float beta2, float eps,
                   float weight_decay, float bc1, float bc2, float grad_scale,
                   std::uint16_t* weights_bf16) override;

  // The Llama family's ops (cuda_llama_ops.cpp), in f32 on the kernels of
  // llama_launch.hpp. RoPE runs as its own pass over qkv; fusing it into the
  // attention kernels' loads is later work.
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int N, int C,
                       float eps) override;
  void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp,
                        const float* w, const float* rstd, int N, int C) override;
  std::unique_ptr<RotaryTable> make_rotary_table(int positions, int hs, double theta) override;
  void rope_forward(float* x, const RotaryTable& table, int B, int T, int heads, int hs,
                    std::size_t ld, int pos0) override;
  void rope_backward(float* dx, const RotaryTable& table, int B, int T, int heads, int hs,
                     std::size_t ld, int pos0) override;
  void swiglu_forward(float* out, const float* inp, int N, int F) override;
  void swiglu_backward(float* dinp, const float* dout, const float* inp, int N, int F) override;
  void gqa_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int NH,
                             int KVH, int hs) override;
  void gqa_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                              const float* lse, int B, int T, int NH, int KVH, int hs) override;

 private:
  // Runs one op's launches between the timer's marks and checks the launch.
  template <class Launch>
  void run(const char* op, Launch&& launch) {
    timer_.begin(op);
    launch();
    cuda_check(cudaGetLastError(), site_, op);
    timer_.end();
  }
  // Device scratch of at least `bytes` (grown on demand, kept for the run).
  void* scratch(std::size_t bytes);
  // m's n f32 values: given, or widened from its bits into widen slot `slot`
  // (one per operand of a product: 0 dout or qkv, 1 weight, 2 input).
  const float* values_of(MatrixIn m, std::size_t n, int slot);
  // m's bf16 bits: given, or its bf16 values packed into widen slot `slot`;
  // null when m is f32 values (the product then runs in f32).
  const std::uint16_t* bits_of(MatrixIn m, std::size_t n, int slot);
  void* widen_slot(int slot, std::size_t bytes);
  // The copy stream, made to wait for the work issued so far on the compute stream.
  cudaStream_t copy_stream_after_compute();

  CudaSite site_;
  bool allow_tf32_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;  // the async copies (made on first use)
  cudaEvent_t issued_ = nullptr;        // the compute stream's work before one of them
  // A checkpoint drain's copies, from its own thread (made on first use).
  cudaStream_t background_stream_ = nullptr;
  cudaEvent_t background_after_ = nullptr;
  std::unique_ptr<Gemms> gemms_;
  KernelTimer timer_;
  void* scratch_ = nullptr;
  std::size_t scratch_bytes_ = 0;
  void* widen_[3] = {};
  std::size_t widen_bytes_[3] = {};
  std::vector<AdamWSpan> adamw_spans_;  // what adamw_plan_dev_ was planned from
  std::size_t adamw_chunks_ = 0;         // and its chunks
  void* adamw_plan_dev_ = nullptr;
  std::size_t adamw_plan_bytes_ = 0;
};

// The kernels' storage kind of t (gpu::kF32, kBF16, kF16), or -1.
int storage_kind(DType t);

// Makes the backend on options.device (which becomes this thread's device).
std::unique_ptr<CudaBackend> make_cuda_backend(const CudaBackendOptions& options);

}  // namespace trident
