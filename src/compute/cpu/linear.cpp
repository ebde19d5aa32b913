#include "compute/cpu/linear.hpp"

#include <vector>

#include "compute/cpu/blas.hpp"
#include "compute/cpu/gemm_bf16.hpp"
#include "compute/cpu/half_convert.hpp"
#include "compute/cpu/kernels.hpp"

namespace trident::cpu {
namespace {

Bf16Operand operand(MatrixIn m) { return {m.values, m.bf16}; }

// m's f32 values (n of them, contiguous): given, or widened from its bits
// into `widened` (an f32 fallback for an operand given as bits only).
const float* values_of(MatrixIn m, std::size_t n, ScratchVector<float>& widened) {
  if (m.values) return m.values;
  widened.resize(n);
  from_16bit(widened.data(), m.bf16, n, DType::bf16);
  return widened.data();
}

}  // namespace

void linear_forward(float* out, MatrixIn inp, MatrixIn w, const float* bias, int N, int IC,
                    int OC) {
  // The bf16 GEMM adds the bias in its epilogue, the f32 one after.
  if (gemm_bf16(false, true, N, OC, IC, operand(inp), IC, operand(w), IC, false, out, OC, bias))
    return;
  thread_local ScratchVector<float> x, wv;
  gemm(false, true, N, OC, IC, 1.0f, values_of(inp, std::size_t(N) * IC, x), IC,
       values_of(w, std::size_t(OC) * IC, wv), IC, 0.0f, out, OC);
  if (bias) add_bias(out, bias, N, OC);
}

void linear_backward(float* dinp, float* dw, float* dbias, MatrixIn dout, MatrixIn inp,
                     MatrixIn w, int N, int IC, int OC, InputGrad dinp_mode) {
  const bool add = dinp_mode == InputGrad::add;
  // dout feeds both products: packed once when it comes as values.
  thread_local ScratchVector<std::uint16_t> dout16;
  Bf16Operand d = operand(dout);
  if (!d.bits && dinp && dw && pack_bf16_values(dout16, dout.values, N, OC, OC))
    d.bits = dout16.data();
  thread_local ScratchVector<float> dv, xv, wv;
  const std::size_t n_dout = std::size_t(N) * OC;
  if (dinp && !gemm_bf16(false, false, N, IC, OC, d, OC, operand(w), IC, add, dinp, IC))
    gemm(false, false, N, IC, OC, 1.0f, values_of(dout, n_dout, dv), OC,
         values_of(w, std::size_t(OC) * IC, wv), IC, add ? 1.0f : 0.0f, dinp, IC);
  if (dw && !gemm_bf16(true, false, OC, IC, N, d, OC, operand(inp), IC, true, dw, IC))
    gemm(true, false, OC, IC, N, 1.0f, values_of(dout, n_dout, dv), OC,
         values_of(inp, std::size_t(N) * IC, xv), IC, 1.0f, dw, IC);
  if (dbias) bias_backward(dbias, values_of(dout, n_dout, dv), N, OC);
}

}  // namespace trident::cpu
