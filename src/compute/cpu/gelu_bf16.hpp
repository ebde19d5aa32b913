// GELU of a bf16 run fused with the roundings around it: one pass over the
// MLP's widest activation instead of three, the same values as rounding,
// applying GELU and rounding again in separate passes.
#pragma once
#include <cstddef>
#include <cstdint>

namespace trident::cpu {

// inp rounded to bf16 in place; out = bf16(gelu(inp)); where not null, bits
// and inp_bits get out's and inp's bf16 bits. out null: bits and inp_bits
// alone are written (inp keeps its values); inp null too: the input is
// inp_bits, read only.
void gelu_forward_bf16(float* out, std::uint16_t* bits, float* inp, std::uint16_t* inp_bits,
                       std::size_t n);
// dinp = bf16(gelu'(inp) * bf16(dout)) and, where bits is not null, its bf16
// bits. dout is read only; inp is read from inp_bits where they are given.
void gelu_backward_bf16(float* dinp, std::uint16_t* bits, const float* inp,
                        const std::uint16_t* inp_bits, const float* dout, std::size_t n);

}  // namespace trident::cpu
