// The CPU backend's linear layers on MatrixIn operands: bf16 kernels straight
// from bf16 bits where a caller gives them (16-bit weights, packed rounded
// activations), packing only what comes as values; f32 kernels otherwise.
#pragma once

#include "compute/bf16_operands.hpp"

namespace trident::cpu {

void linear_forward(float* out, MatrixIn inp, MatrixIn w, const float* bias, int N, int IC,
                    int OC);
void linear_backward(float* dinp, float* dw, float* dbias, MatrixIn dout, MatrixIn inp,
                     MatrixIn w, int N, int IC, int OC, InputGrad dinp_mode);

}  // namespace trident::cpu
