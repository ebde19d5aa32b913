#include "model/micro_batch.hpp"

#include "model/gpt.hpp"

namespace trident {

MicroBatchStorage::MicroBatchStorage(const GptModel& model, ComputeBackend& backend,
                                     MemoryLedger& ledger, bool with_weight_inputs) {
  const MicroBatchSizes n = model.micro_batch_sizes();
  const MemCategory acts = MemCategory::activations;
  saved_ = Arena(backend, ledger, acts, n.saved);
  if (n.saved16 > 0)
    saved16_ = Arena(backend, ledger, acts, n.saved16, model.activation_policy().store);
  tokens_ = Arena(backend, ledger, acts, n.tokens, DType::i32);
  if (with_weight_inputs && n.weight_inputs > 0)
    weight_inputs_ = Arena(backend, ledger, acts, n.weight_inputs);
}

MicroBatchActs MicroBatchStorage::acts() {
  return {saved_.f32(), static_cast<std::uint16_t*>(saved16_.data()),
          static_cast<std::int32_t*>(tokens_.data()), weight_inputs_.f32()};
}

}  // namespace trident
