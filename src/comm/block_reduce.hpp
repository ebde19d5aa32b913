// Element-wise reduction of one buffer into another, in the buffers' own
// type: what a reduce-scatter does with each block it receives. 16-bit
// floats add in f32 and round each result to nearest even, as MPI's 16-bit
// sum operation and a GPU's reduction step do.
#pragma once
#include <cstddef>

#include "comm/communicator.hpp"

namespace trident {

// acc[i] = acc[i] op in[i] for n elements of type t.
void reduce_into(void* acc, const void* in, std::size_t n, DType t, ReduceOp op);

}  // namespace trident
