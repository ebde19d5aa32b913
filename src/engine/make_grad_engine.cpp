// The one place that chooses how a chunk's gradients are synchronised.
#include "engine/data_parallel_engine.hpp"
#include "engine/zero_engine.hpp"
#include "io/deck.hpp"

namespace trident {

EngineSections engine_sections(const Deck& deck) {
  return {deck.model, deck.train, deck.parallel, deck.zero, deck.offload};
}

UnitLayout zero_unit_layout(const ZeroSection& zero, const GptConfig& model, int dp, int stage,
                            const TensorParallelLayout& tp) {
  UnitLayout u(stage > 0 ? std::size_t(dp) * TensorTable::kAlign : 1);  // dp equal, aligned slices
  // Stage 3 gathers units into slots, stages 2-3 reduce-scatter them through
  // slots: a table cut into units no larger than a block bounds both.
  if (stage >= 2) {
    u.dp = dp;
    u.table_units = zero.table_units > 0 ? zero.table_units : table_units_for_blocks(model, tp);
  }
  return u;
}

std::unique_ptr<GradEngine> make_grad_engine(const EngineSetup& s, UnitLayout& units) {
  const EngineSections& d = s.sections;
  const AdamWConfig adam{float(d.train.beta1), float(d.train.beta2), float(d.train.eps),
                         float(d.train.weight_decay), s.weights, s.grads};
  const TensorParallelLayout tp{s.grid.shape().tp, s.grid.coord().tp,
                                d.parallel.sequence_parallel};
  units = zero_unit_layout(d.zero, d.model, s.grid.shape().dp, d.zero.stage, tp);
  if (d.zero.stage > 0) return std::make_unique<ZeroEngine>(s, units, adam);
  return std::make_unique<DataParallelEngine>(
      s.grid, s.backend, s.ledger, adam, d.parallel.dp_mode == DpMode::gather,
      std::size_t(d.parallel.bucket_mb * 1024 * 1024), d.parallel.post_validation);
}

}  // namespace trident
