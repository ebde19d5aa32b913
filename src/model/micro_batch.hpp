// What one micro-batch's pass keeps beyond itself, as storage handed to the
// model: whoever schedules passes (a pipeline runner, a test, the profiler)
// owns it and decides how many micro-batches are held at once; the model's
// static tables size each piece (GptModel::saved_activation_table,
// saved_16bit_table, weight_input_layout).
#pragma once
#include <cstddef>
#include <cstdint>

#include "memory/arena.hpp"

namespace trident {

class GptModel;

// One micro-batch's activation storage, on the model's device.
struct MicroBatchActs {
  float* saved = nullptr;            // what backward reads (saved_activation_table)
  std::uint16_t* saved16 = nullptr;  // the 16-bit copies (saved_16bit_table); null if none
  std::int32_t* tokens = nullptr;    // B*T tokens, then B*T targets
  // Split backward: what B keeps for W that finds no dead room in `saved`
  // (weight_input_layout(...).buffer); null if none or not split.
  float* weight_inputs = nullptr;
};

// Elements of each piece for one micro-batch of a built model.
struct MicroBatchSizes {
  std::size_t saved = 0, saved16 = 0, tokens = 0, weight_inputs = 0;
};

// Storage for one micro-batch, owned: the simple callers' (tests, the
// profiler, a serial run); a pipeline runner pools these.
class MicroBatchStorage {
 public:
  MicroBatchStorage() = default;
  // with_weight_inputs: room for a split backward's W inputs too.
  MicroBatchStorage(const GptModel& model, ComputeBackend& backend, MemoryLedger& ledger,
                    bool with_weight_inputs = false);
  MicroBatchActs acts();

 private:
  Arena saved_, saved16_, tokens_, weight_inputs_;
};

}  // namespace trident
