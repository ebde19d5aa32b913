// Memory per rank before running: built from the same tables and ZeRO plan the
// trainer allocates from, so every category is exact (padding included), not a
// formula. Model state is the shards; ZeRO's gather and reduce slots and f32
// working copies are working buffers (MemCategory::buffers).
#pragma once
#include <array>
#include <cstddef>

#include "grid/grid.hpp"
#include "io/deck.hpp"
#include "memory/ledger.hpp"

namespace trident {

struct MemoryEstimate {
  std::array<double, kMemCategories> bytes{};  // per category, as the ledger counts them
  double parameters = 0;                       // elements of the global model
  double model_state() const;                  // params + grads + optimizer
  double peak() const;                         // every arena is live for the whole step
};

// Rank 0's view (the first pipeline stage, first vocabulary shard and, in
// gather mode, the optimizer's holder) for the deck's layout and the given
// ZeRO stage, activations for as many micro-batches as its schedule keeps.
MemoryEstimate estimate_memory(const Deck& deck, const GridShape& shape, int zero_stage);

// The ZeRO paper's model-state bytes per rank for Ψ parameters on N data ranks:
// mixed precision keeps 2 + 2 + 12 bytes per parameter (fp16 weights and
// gradients, fp32 master, momentum, variance); fp32 keeps 4 + 4 + 8.
double zero_paper_bytes(double psi, int dp, int stage, bool mixed_precision);

}  // namespace trident
