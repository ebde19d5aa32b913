// The one place that chooses how a chunk's gradients are synchronised.
#include "engine/data_parallel_engine.hpp"
#include "engine/zero_engine.hpp"

namespace trident {

std::unique_ptr<GradEngine> make_grad_engine(const EngineSetup& s, std::size_t& unit_align) {
  const auto& t = s.deck.train;
  const AdamWConfig adam{float(t.beta1), float(t.beta2), float(t.eps), float(t.weight_decay),
                         s.weights, s.grads};
  if (s.deck.zero.stage > 0) {
    // Every unit splits into dp equal, vector-aligned slices.
    unit_align = std::size_t(s.grid.shape().dp) * TensorTable::kAlign;
    return std::make_unique<ZeroEngine>(s, unit_align, adam);
  }
  unit_align = 1;
  return std::make_unique<DataParallelEngine>(
      s.grid, s.backend, s.ledger, adam, s.deck.parallel.dp_mode == "gather",
      std::size_t(s.deck.parallel.bucket_mb * 1024 * 1024));
}

}  // namespace trident
