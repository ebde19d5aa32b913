// The compute seam's core: memory and the f32 math of a GPT block, forward
// and backward. The CPU backend (oneDNN GEMMs + OpenMP loops, compute/cpu/)
// and the CUDA backend (cuBLASLt + own kernels, compute/cuda/) implement it.
// Pointers are the backend's memory (device memory for CUDA); ops may run
// asynchronously, and copy_to_host / sum_squares return only once their
// values are on the host.
//
// What is core: every op a run in f32 needs (allocation, copies and
// conversions, the f32 forward and backward ops, the optimizer's vector ops),
// since every backend must have them. What is not: GEMM operands given as
// bf16 bits and the ops fused with bf16 rounding (Bf16Operands,
// compute/bf16_operands.hpp), which a backend has only where it has bf16
// kernels (bf16_operands()); the Llama family's block ops (LlamaOps,
// compute/llama_ops.hpp: every backend has them, but apart, as GPT-2 runs
// never call them); and what a backend says about itself (name, peak,
// kernel times: BackendInfo, compute/backend_info.hpp).
//
// Conventions: row-major; linear weights are (out, in) as in PyTorch, so
// y = x W^T + b; every backward op ADDS into its outputs (weight gradients
// accumulate over micro-batches, input gradients over branches), so callers
// zero what must start at zero. The backwards of layernorm and matmul skip
// null outputs: the zero-bubble schedules run the input gradient (B) and the
// weight gradients (W) as separate passes (Qi et al. 2024, section 2).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "compute/adamw_math.hpp"
#include "compute/backend_info.hpp"
#include "core/dtype.hpp"

namespace trident {

// How matmul_backward leaves the input gradient: added to what the buffer
// holds (branches meeting there, pieces summed), or written over it (no
// zeroing pass first).
enum class InputGrad { add, write };

class Bf16Operands;
class LlamaOps;

class ComputeBackend {
 public:
  virtual ~ComputeBackend() = default;
  // Name, description, peak and kernel times (the run's header and MFU).
  virtual BackendInfo& info() = 0;
  const BackendInfo& info() const { return const_cast<ComputeBackend&>(*this).info(); }
  // The GEMM-operand ops on bf16 bits and the ops fused with bf16 rounding,
  // where this backend has bf16 kernels to read them; else null (a caller
  // then computes on f32 values rounded as 16-bit storage would: see
  // Bf16OperandsFor in compute/bf16_operands.hpp).
  virtual Bf16Operands* bf16_operands() { return nullptr; }
  // The Llama family's ops (compute/llama_ops.hpp): every backend has them.
  virtual LlamaOps& llama_ops() = 0;

  // Memory on the backend's device.
  virtual void* allocate(std::size_t bytes) = 0;
  // The most memory the kernels held at once outside the arenas (scratch).
  virtual std::size_t kernel_scratch_peak() const { return 0; }
  // Whether that memory is host memory the CPU reads and writes in place
  // (checkpoint files pass device memory through host buffers).
  virtual bool memory_is_host() const { return true; }
  virtual void release(void* p, std::size_t bytes) = 0;
  // Page-locks host memory the device copies to and from often (offloaded
  // state, swap staging), and undoes it; a host-memory backend need not.
  virtual void pin_host(void* /*host*/, std::size_t /*bytes*/) {}
  virtual void unpin_host(void* /*host*/, std::size_t /*bytes*/) {}
  virtual void zero(void* p, std::size_t bytes) = 0;
  virtual void copy_to_host(void* host, const void* dev, std::size_t bytes) = 0;
  virtual void copy_from_host(void* dev, const void* host, std::size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;  // device to device
  // Copies that overlap the work issued after them (CUDA: a copy stream that
  // starts once the work issued so far is done; the host memory should be
  // pinned). Neither side may be touched again until wait_copies(), which
  // returns once every such copy is complete. A host-memory backend copies at once.
  virtual void copy_to_host_async(void* host, const void* dev, std::size_t bytes) {
    copy_to_host(host, dev, bytes);
  }
  virtual void copy_from_host_async(void* dev, const void* host, std::size_t bytes) {
    copy_from_host(dev, host, bytes);
  }
  virtual void wait_copies() {}
  // ---- Background checkpoint reads (checkpoint.async); two seams, both optional ----
  // On the thread issuing the work: orders later background reads after the
  // work issued so far (CUDA: an event the background stream waits for).
  virtual void order_background_reads() {}
  // From another thread (a checkpoint drain): device memory to host memory,
  // after the work ordered by order_background_reads(); returns once copied.
  // CUDA: on a stream of its own, so the compute stream is never waited on.
  virtual void copy_to_host_in_background(void* host, const void* dev, std::size_t bytes) {
    copy_to_host(host, dev, bytes);
  }
  // rows x cols floats between matrices with leading dimensions dst_ld and
  // src_ld (a column block of the logits to or from a contiguous buffer).
  virtual void copy_2d(float* dst, std::size_t dst_ld, const float* src, std::size_t src_ld,
                       std::size_t rows, std::size_t cols) = 0;
  virtual void synchronize() = 0;
  // f32 to or from bf16/f16 storage (round to nearest even; f16 overflows to
  // inf), or f32 to f32; and f32 values rounded in place to the nearest value
  // `type` holds (what storing and reloading them gives).
  virtual void convert(void* dst, DType dst_type, const void* src, DType src_type,
                       std::size_t n) = 0;
  virtual void round_to(float* x, DType type, std::size_t n) = 0;

  // out[n,:] = wte[tok[n] - lo, :] for tokens in the shard [lo, lo + count), else 0.
  virtual void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, int lo,
                                 int count, int N, int C) = 0;
  virtual void embedding_backward(float* dwte, const float* dout, const std::int32_t* tokens,
                                  int lo, int count, int N, int C) = 0;
  // out[n,:] += wpe[(first + n) % T, :] for N consecutive tokens of sequences of T.
  virtual void position_forward(float* out, const float* wpe, int N, int T, int first, int C) = 0;
  virtual void position_backward(float* dwpe, const float* dout, int N, int T, int first,
                                 int C) = 0;

  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                 const float* w, const float* b, int N, int C) = 0;
  // dinp may be null (then w may be too); dw and db are both null or neither.
  virtual void layernorm_backward(float* dinp, float* dw, float* db, const float* dout,
                                  const float* inp, const float* w, const float* mean,
                                  const float* rstd, int N, int C) = 0;

  // out (N, OC) = inp (N, IC) * w^T (w is OC x IC) + bias (may be null).
  virtual void matmul_forward(float* out, const float* inp, const float* w, const float* bias,
                              int N, int IC, int OC) = 0;
  // Any of dinp (then w may be null), dw (then inp may be null) and dbias may
  // be null; dw and dbias are added to, dinp as `dinp_mode` says.
  virtual void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout,
                               const float* inp, const float* w, int N, int IC, int OC,
                               InputGrad dinp_mode) = 0;

  // Causal multi-head attention. qkv is (B, T, 3C) as [q | k | v]; out is
  // (B, T, C); lse (B, NH, T) gets each query's log-sum-exp of its scaled
  // scores, which with q, k, v and out is all backward needs: the (T, T)
  // probabilities are never kept (FlashAttention-2, Dao 2023).
  virtual void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C,
                                 int NH) = 0;
  // Recomputes the probabilities from q, k and lse; adds into dqkv.
  virtual void attention_backward(float* dqkv, const float* dout, const float* qkv,
                                  const float* out, const float* lse, int B, int T, int C,
                                  int NH) = 0;

  virtual void gelu_forward(float* out, const float* inp, std::size_t n) = 0;
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n) = 0;
  virtual void add(float* out, const float* a, const float* b, std::size_t n) = 0;

  // Softmax cross-entropy over a vocabulary shard (V columns from global
  // column lo, the first `valid` real), in three phases so shards can be
  // combined in between: row maxima; packed sums [exp-sum x N | target logit x N];
  // losses and, if dlogits is non-null, dloss * (softmax - onehot) (may alias logits).
  virtual void xent_max(float* row_max, const float* logits, int N, int V, int valid) = 0;
  virtual void xent_sums(float* packed, const float* logits, const float* row_max,
                         const std::int32_t* targets, int lo, int N, int V, int valid) = 0;
  // xent_max then xent_sums, for a vocabulary held whole (nothing to combine
  // between them); a backend may take both in one pass over the logits (an
  // online maximum, its sum rescaled as the maximum grows: the same values up
  // to rounding).
  virtual void xent_stats(float* row_max, float* packed, const float* logits,
                          const std::int32_t* targets, int N, int V, int valid) {
    xent_max(row_max, logits, N, V, valid);
    xent_sums(packed, logits, row_max, targets, 0, N, V, valid);
  }
  virtual void xent_finish(float* losses, float* dlogits, const float* logits,
                           const float* row_max, const float* packed,
                           const std::int32_t* targets, int lo, int N, int V, int valid,
                           float dloss) = 0;

  // Optimizer-side vector ops.
  virtual double sum_squares(const float* x, std::size_t n) = 0;
  // out[i] = sum_squares(xs[i], ns[i]) for `count` arrays: the same values,
  // with one wait for all of them instead of one each.
  virtual void sum_squares_each(const float* const* xs, const std::size_t* ns, std::size_t count,
                                double* out) {
    for (std::size_t i = 0; i < count; ++i) out[i] = sum_squares(xs[i], ns[i]);
  }
  virtual void scale(float* x, float s, std::size_t n) = 0;
  // Decoupled AdamW (PyTorch semantics) on grad * grad_scale (the clipping
  // factor); bc1/bc2 are 1 - beta^t. Where weights_bf16 is not null it gets
  // the updated parameters' bf16 bits (16-bit weights in the same pass).
  // Each span is `n` elements from `offset` of all five arrays, decayed by
  // weight_decay or not at all: a whole table of tensors in one call (one
  // launch on a GPU, where 148 launches of small tensors ran below bandwidth).
  virtual void adamw_spans(float* param, const float* grad, float* m, float* v,
                           const AdamWSpan* spans, std::size_t count, float lr, float beta1,
                           float beta2, float eps, float weight_decay, float bc1, float bc2,
                           float grad_scale, std::uint16_t* weights_bf16) = 0;
  // One array of n elements.
  void adamw(float* param, const float* grad, float* m, float* v, std::size_t n, float lr,
             float beta1, float beta2, float eps, float weight_decay, float bc1, float bc2,
             float grad_scale, std::uint16_t* weights_bf16) {
    const AdamWSpan span{0, n, true};
    adamw_spans(param, grad, m, v, &span, 1, lr, beta1, beta2, eps, weight_decay, bc1, bc2,
                grad_scale, weights_bf16);
  }
};

// threads <= 0: pick from the cores available to this rank.
std::unique_ptr<ComputeBackend> make_cpu_backend(int threads);

}  // namespace trident
