// Element-wise float loops of the CPU backend (residual add, scaling, AdamW,
// sum of squares), vectorised for the CPU they run on.
#pragma once
#include <cstddef>
#include <cstdint>

namespace trident::cpu {

void add(float* out, const float* a, const float* b, std::size_t n);
void scale(float* x, float s, std::size_t n);
void adamw(float* p, const float* g, float* m, float* v, std::size_t n, float lr, float beta1,
           float beta2, float eps, float wd, float bc1, float bc2, float grad_scale = 1.0f,
           std::uint16_t* weights_bf16 = nullptr);
// Sums in fixed chunks, so the result does not depend on the thread count.
double sum_squares(const float* x, std::size_t n);

}  // namespace trident::cpu
