// The compute seam's 16-bit operand capability: GEMM and attention operands
// given as bf16 bits (a 16-bit arena, or the packed copy of a rounded
// activation), and the ops that round their results to bf16 (or f16) values,
// fused with writing the bits the next GEMM reads. A backend with bf16
// kernels implements it (the CPU's AMX/AVX-512-bf16 path, the CUDA backend)
// and returns it from ComputeBackend::bf16_operands(); a caller on any other
// backend uses RoundedBf16Operands, which computes on the f32 core and rounds
// (Bf16OperandsFor picks one).
//
// The primitives (matmul, attention, embedding from bits) are each backend's
// own; the rounded ops have defaults that run the primitive and round after
// it, which a backend overrides where it fuses the passes.
#pragma once
#include <cstddef>
#include <cstdint>

#include "compute/backend.hpp"

namespace trident {

// A matrix a linear layer's GEMM reads: its f32 values, its bf16 bits, or
// both when they are the same values. A backend that reads bf16 operands
// takes the bits and skips packing; RoundedBf16Operands reads the values,
// which callers then always give. bf16_values: the values are bf16 values
// (rounded, or widened bf16 weights), so a backend may pack them for bf16
// kernels without checking each one.
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

class Bf16Operands {
 public:
  // `core`: the backend whose memory and f32 ops the defaults run on.
  explicit Bf16Operands(ComputeBackend& core) : core_(core) {}
  virtual ~Bf16Operands() = default;
  Bf16Operands(const Bf16Operands&) = delete;
  Bf16Operands& operator=(const Bf16Operands&) = delete;

  // The primitives, as the core's matmul, attention and embedding lookup on
  // MatrixIn operands. bf16 (attention): q, k, v (and dout) hold bf16 values,
  // and the probabilities and score gradients are rounded to bf16 for the tile
  // products, which then run on bf16 kernels with f32 sums (FlashAttention's
  // bf16 path); without them attention computes in f32. dout's values are
  // always given (backward reads them beside out).
  virtual void matmul_forward(float* out, MatrixIn inp, MatrixIn w, const float* bias, int N,
                              int IC, int OC) = 0;
  virtual void matmul_backward(float* dinp, float* dw, float* dbias, MatrixIn dout, MatrixIn inp,
                               MatrixIn w, int N, int IC, int OC, InputGrad dinp_mode) = 0;
  virtual void attention_forward(float* out, float* lse, MatrixIn qkv, int B, int T, int C,
                                 int NH, bool bf16) = 0;
  virtual void attention_backward(float* dqkv, MatrixIn dout, MatrixIn qkv, const float* out,
                                  const float* lse, int B, int T, int C, int NH, bool bf16) = 0;
  // The embedding lookup from a bf16 table given as its bits (no f32 copy).
  virtual void embedding_forward_bits(float* out, const std::int32_t* tokens,
                                      const std::uint16_t* wte, int lo, int count, int N,
                                      int C) = 0;

  // dst = src rounded to bf16 values (dst may be src) and, where bits is not
  // null, their bf16 bits: a GEMM operand in one pass.
  virtual void round_to_bf16(float* dst, std::uint16_t* bits, const float* src, std::size_t n);
  // layernorm_forward with out rounded to bf16 values and, where bits is not
  // null, their bits (a bf16 GEMM's operand).
  virtual void layernorm_forward_rounded(float* out, std::uint16_t* bits, float* mean,
                                         float* rstd, const float* inp, const float* w,
                                         const float* b, int N, int C);
  // matmul_forward rounded to bf16 values, and their bits (a bf16 run's
  // activation that a bf16 GEMM reads next). values: whether out's f32 values
  // are wanted too; without them a backend may write the bits alone, straight
  // from its GEMM (bias then holds bf16 values, as a bf16 run's weights do),
  // and use out as scratch.
  virtual void matmul_forward_rounded(float* out, std::uint16_t* bits, MatrixIn inp, MatrixIn w,
                                      const float* bias, int N, int IC, int OC, bool values);
  // bf16 attention whose results feed bf16 GEMMs: out (forward) or dqkv
  // (backward, written rather than added to) rounded to bf16 values and,
  // where bits is not null, their bits.
  virtual void attention_forward_rounded(float* out, std::uint16_t* bits, float* lse,
                                         MatrixIn qkv, int B, int T, int C, int NH);
  virtual void attention_backward_rounded(float* dqkv, std::uint16_t* bits, MatrixIn dout,
                                          MatrixIn qkv, const float* out, const float* lse,
                                          int B, int T, int C, int NH);
  // GELU of a 16-bit run (store: bf16 or f16). inp is rounded to store in
  // place (backward reads it so), out is gelu(inp) rounded; bits and inp_bits
  // (bf16 only, each may be null) get out's and inp's bf16 bits. Bits only:
  // out null, bits and inp_bits given (bf16, a backend that reads bf16
  // operands): neither out nor inp is written, the bits are what the next
  // GEMM and backward read; inp null too: the input is inp_bits (a GEMM's
  // bf16 output), read only. The default does not do bits only.
  virtual void gelu_forward_rounded(float* out, std::uint16_t* bits, float* inp,
                                    std::uint16_t* inp_bits, std::size_t n, DType store);
  // dinp = gelu'(inp) * dout, dout and the result rounded to store, bits as
  // above. dout is scratch: what it holds afterwards is unspecified. Where
  // inp_bits is not null (bf16), inp is given as those bits alone: a backend
  // reads them, or widens them into inp first.
  virtual void gelu_backward_rounded(float* dinp, std::uint16_t* bits, float* inp,
                                     const std::uint16_t* inp_bits, float* dout, std::size_t n,
                                     DType store);
  // xent_finish with dlogits (not null) rounded to bf16 values, as the
  // classifier's bf16 GEMMs read them.
  virtual void xent_finish_rounded(float* losses, float* dlogits, const float* logits,
                                   const float* row_max, const float* packed,
                                   const std::int32_t* targets, int lo, int N, int V, int valid,
                                   float dloss);

 protected:
  ComputeBackend& core_;
};

// The 16-bit path on a backend without bf16 kernels: each primitive is the
// core's f32 op on the operands' values (callers give values to such a
// backend: Bf16OperandsFor::reads_bits() is false), attention computes in
// f32, and the rounded ops round the f32 results as the defaults do.
class RoundedBf16Operands final : public Bf16Operands {
 public:
  using Bf16Operands::Bf16Operands;
  void matmul_forward(float* out, MatrixIn inp, MatrixIn w, const float* bias, int N, int IC,
                      int OC) override;
  void matmul_backward(float* dinp, float* dw, float* dbias, MatrixIn dout, MatrixIn inp,
                       MatrixIn w, int N, int IC, int OC, InputGrad dinp_mode) override;
  void attention_forward(float* out, float* lse, MatrixIn qkv, int B, int T, int C, int NH,
                         bool bf16) override;
  void attention_backward(float* dqkv, MatrixIn dout, MatrixIn qkv, const float* out,
                          const float* lse, int B, int T, int C, int NH, bool bf16) override;
  void embedding_forward_bits(float* out, const std::int32_t* tokens, const std::uint16_t* wte,
                              int lo, int count, int N, int C) override;
};

// The 16-bit ops a caller runs on `backend`: the backend's own where it has
// them, else RoundedBf16Operands on its core. Held beside the backend
// reference by whoever calls them (not copied: it may point into itself).
class Bf16OperandsFor {
 public:
  explicit Bf16OperandsFor(ComputeBackend& backend)
      : rounded_(backend),
        ops_(backend.bf16_operands() ? backend.bf16_operands() : &rounded_) {}
  Bf16OperandsFor(const Bf16OperandsFor&) = delete;
  Bf16OperandsFor& operator=(const Bf16OperandsFor&) = delete;
  Bf16Operands* operator->() const { return ops_; }
  Bf16Operands& operator*() const { return *ops_; }
  // Whether the ops read bf16 bits (the backend's own): callers may then give
  // operands as bits alone.
  bool reads_bits() const { return ops_ != &rounded_; }

 private:
  RoundedBf16Operands rounded_;
  Bf16Operands* ops_;
};

}  // namespace trident
