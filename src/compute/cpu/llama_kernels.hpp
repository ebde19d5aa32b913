// CPU kernels of the Llama block: RMSNorm, rotary positions (RoPE), SwiGLU and
// grouped-query causal attention, templated on the scalar type like
// kernels.hpp (the backend would run them in float, tests may run double).
// Row-major; every backward ADDS into its outputs, as the compute seam's do
// (backend.hpp), except RoPE's, which maps a gradient in place. Sums over rows
// are split by columns or owned by one thread, so results do not depend on the
// number of threads.
#pragma once
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace trident::cpu {

// RMSNorm (Zhang & Sennrich 2019), as Llama: out = x * rstd * weight with
// rstd = 1 / sqrt(mean(x^2) + eps) per row of C; no mean, no bias. rstd (N)
// is saved for backward. dinp and dweight are added to; either may be null
// (the zero-bubble schedules run the input and weight gradients apart).
template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int C, T eps);
template <class T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const T* rstd, int N, int C);

// Rotary position embedding (RoFormer, Su et al. 2021), with the pairing of
// Hugging Face's Llama code ("rotate_half"): element i of a head pairs with
// element i + hs/2, both rotated by the angle pos * theta^(-2i/hs). The
// checkpoints people bring are in HF's layout, whose q/k projection rows are
// permuted for this pairing; Meta's original code pairs (2i, 2i+1) instead,
// which is the same model with those rows permuted back.
struct RopeTable {
  int positions = 0, half = 0;  // rows (positions 0..positions-1) and hs / 2 angles per row
  std::vector<float> cos, sin;  // (positions, half), computed in double, rounded once
};
// Built once per (context length, head size, theta); hs must be even. Inline:
// the CUDA backend builds its device copy from the same values.
inline RopeTable make_rope_table(int positions, int hs, double theta) {
  if (hs <= 0 || hs % 2 != 0)
    throw std::invalid_argument("rope: the head size " + std::to_string(hs) + " must be even");
  RopeTable t;
  t.positions = positions;
  t.half = hs / 2;
  t.cos.resize(std::size_t(positions) * t.half);
  t.sin.resize(t.cos.size());
  for (int i = 0; i < t.half; ++i) {
    const double inv_freq = std::pow(theta, -2.0 * i / hs);
    for (int p = 0; p < positions; ++p) {
      const double angle = p * inv_freq;
      t.cos[std::size_t(p) * t.half + i] = float(std::cos(angle));
      t.sin[std::size_t(p) * t.half + i] = float(std::sin(angle));
    }
  }
  return t;
}

// In place on the first `heads` heads (hs each) of every row of x, B * T rows
// ld elements apart; token t of each sequence sits at global position pos0 + t
// (pos0: the first position of these tokens, non-zero for context-parallel
// shards and pipeline chunks of a sequence; pos0 + T <= table.positions).
// On the fused qkv (B, T, (NH + 2 KVH) hs) = [q | k | v], q and k are adjacent:
// heads = NH + KVH and ld = (NH + 2 KVH) hs rotate both in one pass.
template <class T>
void rope_forward(T* x, const RopeTable& table, int B, int T_, int heads, int hs, std::size_t ld,
                  int pos0);
// The gradient through the rotation (its transpose, the rotation by -angle),
// in place: dx holds the gradient of the rotated values and leaves with that
// of the values before rotation.
template <class T>
void rope_backward(T* dx, const RopeTable& table, int B, int T_, int heads, int hs,
                   std::size_t ld, int pos0);

// SwiGLU (Shazeer 2020): out = silu(a) * b, silu(a) = a * sigmoid(a). inp is
// (N, 2F), each row [a | b]: the output of ONE column-parallel GEMM whose
// weight shard on each tensor rank is [W_a rows of that rank | W_b rows of that
// rank], so every rank's half-widths are contiguous in its own output (the
// global weight is [all gate rows | all up rows]: model/param_table.hpp).
// out is (N, F); backward adds [da | db] into dinp (N, 2F).
template <class T>
void swiglu_forward(T* out, const T* inp, int N, int F);
template <class T>
void swiglu_backward(T* dinp, const T* dout, const T* inp, int N, int F);

// Grouped-query causal attention (Ainslie et al. 2023), flash-style (no T x T
// matrix): qkv (B, T, (NH + 2 KVH) hs) as [q | k | v], KVH dividing NH, query
// head h reading key/value head h / (NH / KVH) (KVH = NH: multi-head; KVH = 1:
// multi-query). out (B, T, NH hs); lse (B, NH, T) each query's log-sum-exp of
// its scaled scores, which backward needs and which merges partial results
// over key blocks (ring attention). Backward adds into dqkv; dK and dV of a
// key/value head sum over its group's query heads in a fixed order.
constexpr int kGqaTile = 128;  // queries and keys per tile (a thread's f32 scores: 64 KiB)
template <class T>
void gqa_attention_forward(T* out, T* lse, const T* qkv, int B, int T_, int NH, int KVH, int hs);
template <class T>
void gqa_attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse,
                            int B, int T_, int NH, int KVH, int hs);

}  // namespace trident::cpu
