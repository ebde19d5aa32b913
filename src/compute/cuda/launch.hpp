// Launchers of Trident's own CUDA kernels, callable from host C++. Each is a
// template on the storage type S (those TRIDENT_GPU_STORAGE_TYPES lists in
// device_math.cuh) with fp32 arithmetic inside; statistics the
// kernels keep for backward (mean, rstd, row maxima, packed sums, losses) are
// always fp32. Launchers only enqueue on `stream`; the caller checks
// cudaGetLastError. Semantics are those of the compute seam (backend.hpp, bf16_operands.hpp):
// backward launchers ADD into their outputs.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "compute/adamw_math.hpp"

namespace trident::gpu {

// Embedding of a vocabulary shard and positions (embedding.cu).
template <class S>
void embedding_forward(S* out, const std::int32_t* tok, const S* wte, int lo, int count, int N,
                       int C, cudaStream_t s);
// The same from a bf16 table's bits.
void embedding_forward_bits(float* out, const std::int32_t* tok, const std::uint16_t* wte, int lo,
                            int count, int N, int C, cudaStream_t s);
// Deterministic: one block per chunk of vocabulary rows scans the tokens and
// adds their gradients in token order (no atomics), as the CPU loop does.
template <class S>
void embedding_backward(S* dwte, const S* dout, const std::int32_t* tok, int lo, int count, int N,
                        int C, cudaStream_t s);
template <class S>
void position_forward(S* out, const S* wpe, int N, int T, int first, int C, cudaStream_t s);
template <class S>
void position_backward(S* dwpe, const S* dout, int N, int T, int first, int C, cudaStream_t s);

// Layer norm and column sums (layernorm.cu). Parameter gradients are summed
// over rows in fixed chunks into fp32 partials, then the chunks in order.
template <class S>
void layernorm_forward(S* out, float* mean, float* rstd, const S* inp, const S* w, const S* b,
                       int N, int C, cudaStream_t s);
// The same in f32 with out rounded to bf16 values, and their bits where bits
// is not null.
void layernorm_forward_rounded(float* out, std::uint16_t* bits, float* mean, float* rstd,
                               const float* inp, const float* w, const float* b, int N, int C,
                               cudaStream_t s);
std::size_t layernorm_backward_scratch(int N, int C);  // floats
template <class S>
void layernorm_backward(S* dinp, S* dw, S* db, const S* dout, const S* inp, const S* w,
                        const float* mean, const float* rstd, int N, int C, float* scratch,
                        cudaStream_t s);
std::size_t bias_backward_scratch(int N, int OC);  // floats
// dbias[j] += sum_i dout[i, j].
template <class S>
void bias_backward(S* dbias, const S* dout, int N, int OC, float* scratch, cudaStream_t s);
// The same from bf16 bits of dout: half the bytes read, the same sums.
void bias_backward_bits(float* dbias, const std::uint16_t* dout, int N, int OC, float* scratch,
                        cudaStream_t s);
// out[i, j] += bias[j] (for GEMMs that could not fuse the bias).
template <class S>
void add_bias(S* out, const S* bias, int N, int OC, cudaStream_t s);

// Causal softmax over `rows` rows of length T, row r being query r % T
// (attention.cu): in place, on scores already scaled; zeros above the
// diagonal; lse[r] = log sum_j exp(score_rj). bits (optional): the
// probabilities' bf16 bits go there instead of over the scores.
template <class S>
void causal_softmax_forward(S* att, float* lse, std::size_t rows, int T, cudaStream_t s,
                            std::uint16_t* bits = nullptr);
// The same probabilities from scaled scores and that lse: exp(score - lse);
// bits (optional): their bf16 bits too.
template <class S>
void causal_softmax_recompute(S* att, const float* lse, std::size_t rows, int T, cudaStream_t s,
                              std::uint16_t* bits = nullptr);
// In place on datt: dS = P * (dP - rowsum(P * dP)), zeros above the diagonal;
// bits (optional): dS's bf16 bits go there instead.
template <class S>
void causal_softmax_backward(S* datt, const S* att, std::size_t rows, int T, cudaStream_t s,
                             std::uint16_t* bits = nullptr);

// Causal attention of bf16 q, k, v ((B, T, 3C) bits, rows 16-byte aligned) on
// tensor cores, T x T never in memory (flash_attention.cu): head sizes 32,
// 64 and 128. out (B, T, C) and lse (B, NH, T) as the seam defines them;
// backward adds into dqkv (f32) and takes dout as bits and as f32 values
// (for D = dO . O, beside out); dots: B * NH * T floats of scratch.
bool flash_attention_fits(int C, int NH);
// rounded: out (forward) or dqkv (backward, then written rather than added
// to) rounded to bf16 values, and their bits where bits is not null.
void flash_attention_forward(float* out, float* lse, const std::uint16_t* qkv, int B, int T,
                             int C, int NH, bool rounded, std::uint16_t* bits, cudaStream_t s);
void flash_attention_backward(float* dqkv, const std::uint16_t* qkv, const std::uint16_t* dout,
                              const float* dout_values, const float* out, const float* lse,
                              float* dots, int B, int T, int C, int NH, bool rounded,
                              std::uint16_t* bits, cudaStream_t s);

// Element-wise ops (elementwise.cu).
template <class S>
void gelu_forward(S* out, const S* inp, std::size_t n, cudaStream_t s);
template <class S>
void gelu_backward(S* dinp, const S* inp, const S* dout, std::size_t n, cudaStream_t s);
// GELU of a 16-bit run, each direction in one pass (store_kind kBF16 or
// kF16), as Bf16Operands::gelu_forward_rounded and gelu_backward_rounded
// define them.
void gelu_forward_rounded(float* out, std::uint16_t* bits, float* inp, std::uint16_t* inp_bits,
                          std::size_t n, int store_kind, cudaStream_t s);
void gelu_backward_rounded(float* dinp, std::uint16_t* bits, const float* inp,
                           const std::uint16_t* inp_bits, const float* dout, std::size_t n,
                           int store_kind, cudaStream_t s);
template <class S>
void add(S* out, const S* a, const S* b, std::size_t n, cudaStream_t s);
template <class S>
void scale(S* x, float factor, std::size_t n, cudaStream_t s);
// AdamW of one array (ComputeBackend::adamw's arithmetic).
void adamw(float* param, const float* grad, float* m, float* v, std::size_t n, float lr,
           float beta1, float beta2, float eps, float weight_decay, float bc1, float bc2,
           float grad_scale, std::uint16_t* bf16, cudaStream_t s);
// AdamW over spans of one table (ComputeBackend::adamw_spans) in one launch:
// the host cuts the spans into chunks of at most kAdamWChunk elements
// (adamw_plan), the device holds that plan, one block updates each chunk.
struct AdamWChunk {
  std::size_t offset;
  unsigned n, decay;
};
constexpr std::size_t kAdamWChunk = 8192;
std::vector<AdamWChunk> adamw_plan(const AdamWSpan* spans, std::size_t count);
void adamw_chunks(float* param, const float* grad, float* m, float* v, const AdamWChunk* chunks,
                  std::size_t n_chunks, float lr, float beta1, float beta2, float eps,
                  float weight_decay, float bc1, float bc2, float grad_scale,
                  std::uint16_t* bf16, cudaStream_t s);

// Storage conversions (convert.cu). Kinds: kF32, kBF16, kF16; false for a
// pair that is not f32 <-> 16-bit.
constexpr int kF32 = 0, kBF16 = 1, kF16 = 2;
bool convert(void* dst, int dst_kind, const void* src, int src_kind, std::size_t n,
             cudaStream_t s);
bool round_to(float* x, int kind, std::size_t n, cudaStream_t s);
// dst = src rounded to bf16 (dst may be src) and, where bits is not null,
// the bf16 bits: one pass.
void round_to_bf16(float* dst, std::uint16_t* bits, const float* src, std::size_t n,
                   cudaStream_t s);

// Vocab-parallel cross-entropy, one block per token (xent.cu).
template <class S>
void xent_max(float* row_max, const S* logits, int N, int V, int valid, cudaStream_t s);
template <class S>
void xent_sums(float* packed, const S* logits, const float* row_max, const std::int32_t* targets,
               int lo, int N, int V, int valid, cudaStream_t s);
// xent_max and xent_sums of an unsplit vocabulary in one pass.
template <class S>
void xent_stats(float* row_max, float* packed, const S* logits, const std::int32_t* targets,
                int N, int V, int valid, cudaStream_t s);
template <class S>
void xent_finish(float* losses, S* dlogits, const S* logits, const float* row_max,
                 const float* packed, const std::int32_t* targets, int lo, int N, int V,
                 int valid, float dloss, bool round_bf16, cudaStream_t s);

// Sums of squares in fp64 of many f32 tensors (reduce.cu): the host plans
// the chunks (sum_squares_chunk_count per tensor, at least one; first_chunk
// has count + 1 entries), the device tables hold that plan, then two
// launches; each result depends on its tensor's length only, never the GPU.
struct SumSquaresChunk {
  const float* x;
  unsigned n;
};
std::size_t sum_squares_chunk_count(std::size_t n);
void sum_squares_plan(const float* const* xs, const std::size_t* ns, std::size_t count,
                      SumSquaresChunk* chunks, unsigned* first_chunk);
void sum_squares_each(double* results, double* partial, const SumSquaresChunk* chunks,
                      std::size_t n_chunks, const unsigned* first_chunk, std::size_t count,
                      cudaStream_t s);

}  // namespace trident::gpu
