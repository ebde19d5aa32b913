// The parameter table of the GPT and its initialisation.
#pragma once
#include <cstdint>

#include "memory/tensor_table.hpp"
#include "model/gpt_config.hpp"

namespace trident {

// The parameter table itself (arena order wte, wpe, block 0 .. L-1, final
// norm; backward finishes gradients back to front) is built per tensor rank by
// build_gpt_param_table in model/param_table.hpp.

// GPT-2 initialisation: matrices N(0, 0.02), residual projections
// N(0, 0.02/sqrt(2*layers)), biases 0, norm weights 1. Each element is drawn
// from a counter-based generator keyed by (seed, tensor name, global index), so
// any shard of any layout computes exactly its slice of the same global model.
void init_gpt_params(const TensorTable& table, float* params, const GptConfig& c,
                     std::uint64_t seed);
// Elements [first, first + count) of the same, into out[0, count): a large
// model is initialised piece by piece, never whole in f32.
void init_gpt_params_range(const TensorTable& table, float* out, const GptConfig& c,
                           std::uint64_t seed, std::size_t first, std::size_t count);

// The i-th standard normal of stream `key` (pure function of its arguments).
double counter_normal(std::uint64_t key, std::uint64_t i);
std::uint64_t stream_key(std::uint64_t seed, const char* name);

}  // namespace trident
