// The one place that chooses how a chunk's gradients are synchronised.
#include "engine/data_parallel_engine.hpp"
#include "engine/zero_engine.hpp"

namespace trident {

UnitLayout zero_unit_layout(const Deck& deck, int dp, int stage, const TensorParallelLayout& tp) {
  UnitLayout u(stage > 0 ? std::size_t(dp) * TensorTable::kAlign : 1);  // dp equal, aligned slices
  // Stage 3 gathers units into slots, stages 2-3 reduce-scatter them through
  // slots: a table cut into units no larger than a block bounds both.
  if (stage >= 2) {
    u.dp = dp;
    u.table_units = deck.zero.table_units > 0 ? deck.zero.table_units
                                               : table_units_for_blocks(deck.model, tp);
  }
  return u;
}

std::unique_ptr<GradEngine> make_grad_engine(const EngineSetup& s, UnitLayout& units) {
  const auto& t = s.deck.train;
  const AdamWConfig adam{float(t.beta1), float(t.beta2), float(t.eps), float(t.weight_decay),
                         s.weights, s.grads};
  const TensorParallelLayout tp{s.grid.shape().tp, s.grid.coord().tp,
                                s.deck.parallel.sequence_parallel};
  units = zero_unit_layout(s.deck, s.grid.shape().dp, s.deck.zero.stage, tp);
  if (s.deck.zero.stage > 0) return std::make_unique<ZeroEngine>(s, units, adam);
  return std::make_unique<DataParallelEngine>(
      s.grid, s.backend, s.ledger, adam, s.deck.parallel.dp_mode == DpMode::gather,
      std::size_t(s.deck.parallel.bucket_mb * 1024 * 1024));
}

}  // namespace trident
