// The compute seam: memory and the math of a GPT block, forward and backward.
// The CPU backend (OpenBLAS + OpenMP) and the CUDA backend (cuBLAS + own
// kernels, compute/cuda/) implement the same functions. Model code calls only
// this interface. Pointers are the backend's memory (device memory for CUDA);
// ops may run asynchronously, and copy_to_host / sum_squares return only
// once their values are on the host.
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
#include <stdexcept>
#include <string>

#include "compute/adamw_math.hpp"
#include "core/dtype.hpp"

namespace trident {

// A matrix a linear layer's GEMM reads: its f32 values, its bf16 bits (a
// 16-bit arena, or the packed copy of a rounded activation), or both when
// they are the same values. A backend that reads bf16 operands
// (reads_bf16_operands()) takes the bits and skips packing; one that does
// not reads the values, which callers then always give. bf16_values: the
// values are bf16 values (rounded, or widened bf16 weights), so a backend may
// pack them for bf16 kernels without checking each one.
struct MatrixIn {
  const float* values = nullptr;
  const std::uint16_t* bf16 = nullptr;
  bool bf16_values = false;
  MatrixIn(const float* v) : values(v) {}  // implicit: an f32 matrix as before
  MatrixIn(const float* v, const std::uint16_t* bits) : values(v), bf16(bits), bf16_values(true) {}
  MatrixIn as_bf16_values(bool are = true) const {
    MatrixIn m = *this;
    m.bf16_values = are;
    return m;
  }
};

// How matmul_backward leaves the input gradient: added to what the buffer
// holds (branches meeting there, pieces summed), or written over it (no
// zeroing pass first).
enum class InputGrad { add, write };

class ComputeBackend {
 public:
  virtual ~ComputeBackend() = default;
  virtual std::string name() const = 0;
  virtual std::string describe() const = 0;  // threads, library versions
  // Device time per op as a table, when the backend was asked to time its
  // kernels (the CUDA backend with TRIDENT_KERNEL_TIMES=1); otherwise empty.
  virtual std::string kernel_report() { return {}; }
  virtual void reset_kernel_times() {}  // from here on (the steady steps)
  // The device's peak dense FLOP/s for compute in `dtype` (the MFU
  // denominator) and where it comes from; 0 when unknown (MFU not printed).
  virtual double peak_flops(DType dtype) const = 0;
  virtual std::string peak_source(DType dtype) const = 0;
  // Something about the kernels in use the user should know (printed as a
  // warning by rank 0), else "".
  virtual std::string warning() const { return {}; }

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
  // dst = src rounded to bf16 values (dst may be src) and, where bits is not
  // null, their bf16 bits: a GEMM operand in one pass.
  virtual void round_to_bf16(float* dst, std::uint16_t* bits, const float* src, std::size_t n) {
    if (dst != src) copy(dst, src, n * sizeof(float));
    round_to(dst, DType::bf16, n);
    if (bits) convert(bits, DType::bf16, dst, DType::f32, n);
  }
  // Whether matmul reads MatrixIn::bf16 (so callers may leave values null).
  virtual bool reads_bf16_operands() const { return false; }

  // out[n,:] = wte[tok[n] - lo, :] for tokens in the shard [lo, lo + count), else 0.
  virtual void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, int lo,
                                 int count, int N, int C) = 0;
  // The same from a bf16 table given as its bits (no f32 copy of the table).
  virtual void embedding_forward_bits(float* out, const std::int32_t* tokens,
                                      const std::uint16_t* wte, int lo, int count, int N,
                                      int C) = 0;
  virtual void embedding_backward(float* dwte, const float* dout, const std::int32_t* tokens,
                                  int lo, int count, int N, int C) = 0;
  // out[n,:] += wpe[(first + n) % T, :] for N consecutive tokens of sequences of T.
  virtual void position_forward(float* out, const float* wpe, int N, int T, int first, int C) = 0;
  virtual void position_backward(float* dwpe, const float* dout, int N, int T, int first,
                                 int C) = 0;

  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                 const float* w, const float* b, int N, int C) = 0;
  // The same with out rounded to bf16 values and, where bits is not null,
  // their bf16 bits (a bf16 GEMM's operand); a backend may fuse the passes.
  virtual void layernorm_forward_rounded(float* out, std::uint16_t* bits, float* mean,
                                         float* rstd, const float* inp, const float* w,
                                         const float* b, int N, int C) {
    layernorm_forward(out, mean, rstd, inp, w, b, N, C);
    round_to_bf16(out, bits, out, std::size_t(N) * C);
  }
  // dinp may be null (then w may be too); dw and db are both null or neither.
  virtual void layernorm_backward(float* dinp, float* dw, float* db, const float* dout,
                                  const float* inp, const float* w, const float* mean,
                                  const float* rstd, int N, int C) = 0;

  // out (N, OC) = inp (N, IC) * w^T (w is OC x IC) + bias (may be null).
  virtual void matmul_forward(float* out, MatrixIn inp, MatrixIn w, const float* bias, int N,
                              int IC, int OC) = 0;
  // The same rounded to bf16 values, and their bits (a bf16 run's activation
  // that a bf16 GEMM reads next). values: whether out's f32 values are wanted
  // too; without them a backend that reads bf16 operands may write the bits
  // alone, straight from its GEMM (bias then holds bf16 values, as a bf16
  // run's weights do), and use out as scratch.
  virtual void matmul_forward_rounded(float* out, std::uint16_t* bits, MatrixIn inp, MatrixIn w,
                                      const float* bias, int N, int IC, int OC, bool values) {
    (void)values;
    matmul_forward(out, inp, w, bias, N, IC, OC);
    round_to_bf16(out, bits, out, std::size_t(N) * OC);
  }
  // Any of dinp (then w may be null), dw (then inp may be null) and dbias may
  // be null; dw and dbias are added to, dinp as `dinp_mode` says.
  virtual void matmul_backward(float* dinp, float* dw, float* dbias, MatrixIn dout, MatrixIn inp,
                               MatrixIn w, int N, int IC, int OC, InputGrad dinp_mode) = 0;

  // Causal multi-head attention. qkv is (B, T, 3C) as [q | k | v]; out is
  // (B, T, C); lse (B, NH, T) gets each query's log-sum-exp of its scaled
  // scores, which with q, k, v and out is all backward needs: the (T, T)
  // probabilities are never kept (FlashAttention-2, Dao 2023). bf16: q, k,
  // v (and dout) hold bf16 values, and the probabilities and score gradients
  // are rounded to bf16 for the tile products, which then run on bf16 kernels
  // with f32 sums (FlashAttention's bf16 path); a backend without them may
  // compute in f32. qkv and dout as for the linears (MatrixIn); dout's values
  // are always given (backward reads them beside out).
  virtual void attention_forward(float* out, float* lse, MatrixIn qkv, int B, int T, int C,
                                 int NH, bool bf16) = 0;
  // Recomputes the probabilities from q, k and lse.
  virtual void attention_backward(float* dqkv, MatrixIn dout, MatrixIn qkv, const float* out,
                                  const float* lse, int B, int T, int C, int NH, bool bf16) = 0;

  // bf16 attention whose results feed bf16 GEMMs: out (forward) or dqkv
  // (backward, written rather than added to) rounded to bf16 values and,
  // where bits is not null, their bits; a backend may fuse the passes.
  virtual void attention_forward_rounded(float* out, std::uint16_t* bits, float* lse,
                                         MatrixIn qkv, int B, int T, int C, int NH) {
    attention_forward(out, lse, qkv, B, T, C, NH, true);
    round_to_bf16(out, bits, out, std::size_t(B) * T * C);
  }
  virtual void attention_backward_rounded(float* dqkv, std::uint16_t* bits, MatrixIn dout,
                                          MatrixIn qkv, const float* out, const float* lse,
                                          int B, int T, int C, int NH) {
    const std::size_t n = std::size_t(B) * T * 3 * C;
    zero(dqkv, n * sizeof(float));
    attention_backward(dqkv, dout, qkv, out, lse, B, T, C, NH, true);
    round_to_bf16(dqkv, bits, dqkv, n);
  }

  virtual void gelu_forward(float* out, const float* inp, std::size_t n) = 0;
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n) = 0;
  // GELU of a 16-bit run (store: bf16 or f16), as these passes compute it; a
  // backend may fuse them into one. inp is rounded to store in place (backward
  // reads it so), out is gelu(inp) rounded; bits and inp_bits (bf16 only, each
  // may be null) get out's and inp's bf16 bits. Bits only: out null, bits and
  // inp_bits given (bf16, a backend that reads bf16 operands): neither out nor
  // inp is written, the bits are what the next GEMM and backward read; inp
  // null too: the input is inp_bits (a GEMM's bf16 output), read only.
  virtual void gelu_forward_rounded(float* out, std::uint16_t* bits, float* inp,
                                    std::uint16_t* inp_bits, std::size_t n, DType store) {
    if (!out) throw std::logic_error("gelu_forward_rounded: bits only is not implemented here");
    round_to(inp, store, n);
    if (inp_bits) convert(inp_bits, DType::bf16, inp, DType::f32, n);
    gelu_forward(out, inp, n);
    if (bits) round_to_bf16(out, bits, out, n);
    else round_to(out, store, n);
  }
  // dinp = gelu'(inp) * dout, dout and the result rounded to store, bits as
  // above. dout is scratch: what it holds afterwards is unspecified. Where
  // inp_bits is not null (bf16), inp is given as those bits alone: a backend
  // reads them, or widens them into inp first.
  virtual void gelu_backward_rounded(float* dinp, std::uint16_t* bits, float* inp,
                                     const std::uint16_t* inp_bits, float* dout, std::size_t n,
                                     DType store) {
    if (inp_bits) convert(inp, DType::f32, inp_bits, DType::bf16, n);
    round_to(dout, store, n);
    zero(dinp, n * sizeof(float));
    gelu_backward(dinp, inp, dout, n);
    if (bits) round_to_bf16(dinp, bits, dinp, n);
    else round_to(dinp, store, n);
  }
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
  // The same with dlogits (not null) rounded to bf16 values, as the
  // classifier's bf16 GEMMs read them; a backend may fuse the passes.
  virtual void xent_finish_rounded(float* losses, float* dlogits, const float* logits,
                                   const float* row_max, const float* packed,
                                   const std::int32_t* targets, int lo, int N, int V, int valid,
                                   float dloss) {
    xent_finish(losses, dlogits, logits, row_max, packed, targets, lo, N, V, valid, dloss);
    round_to(dlogits, DType::bf16, std::size_t(N) * V);
  }

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
