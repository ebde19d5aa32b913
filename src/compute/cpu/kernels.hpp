// CPU kernels of the GPT block, templated on the scalar type: the backend runs
// them in float; the finite-difference tests run the same code in double.
// Reductions over rows are split by columns so results do not depend on the
// number of threads (determinism across thread counts and runs).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace trident::cpu {

template <class T>
void embedding_forward(T* out, const std::int32_t* tok, const T* wte, const T* wpe, int B, int T_,
                       int C);
template <class T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const std::int32_t* tok, int B, int T_,
                        int C);
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int N,
                       int C);
template <class T>
void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w,
                        const T* mean, const T* rstd, int N, int C);
template <class T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int IC, int OC);
template <class T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int N,
                     int IC, int OC);
template <class T>
void attention_forward(T* out, T* att, const T* qkv, int B, int T_, int C, int NH);
template <class T>
void attention_backward(T* dqkv, T* datt, const T* dout, const T* qkv, const T* att, int B, int T_,
                        int C, int NH);
template <class T>
void gelu_forward(T* out, const T* inp, std::size_t n);
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::size_t n);
template <class T>
void cross_entropy(T* losses, T* dlogits, const T* logits, const std::int32_t* targets, int N,
                   int V, T dloss);

}  // namespace trident::cpu
