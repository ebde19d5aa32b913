// The CPU backend's Llama ops (compute/llama_ops.hpp) on the kernels of
// llama_kernels.hpp, in f32.
#pragma once
#include <memory>

#include "compute/llama_ops.hpp"

namespace trident::cpu {

std::unique_ptr<LlamaOps> make_cpu_llama_ops();

}  // namespace trident::cpu
