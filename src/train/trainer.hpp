// One training step and evaluation over a data-parallel replica group.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "compute/backend.hpp"
#include "grid/grid.hpp"
#include "io/deck.hpp"
#include "io/token_shard.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"
#include "parallel/data/data_comm.hpp"

namespace trident {

// Seconds spent per phase on this rank (cumulative).
struct PhaseTimes {
  double data = 0, forward = 0, backward = 0, comm = 0, optimizer = 0, eval = 0;
};

struct StepStats {
  int step = 0;
  double loss = 0;       // mean over the global batch
  double lr = 0;
  double grad_norm = 0;  // before clipping
  double seconds = 0;
};

class Trainer {
 public:
  Trainer(const Deck& deck, Grid& grid, ComputeBackend& backend, MemoryLedger& ledger,
          const TokenDataset& train_data, const TokenDataset* val_data);

  StepStats step(int step);
  double evaluate();  // mean validation loss over train.eval_sequences (collective)

  GptModel& model() { return model_; }
  AdamW* optimizer() { return optimizer_.get(); }  // null where this rank holds no optimizer
  const PhaseTimes& times() const { return times_; }
  std::int64_t tokens_per_step() const {
    return std::int64_t(deck_.train.batch) * deck_.model.seq_len;
  }
  // Window index of sequence `k` of this rank's share of global batch `batch_index`.
  std::uint64_t window_of(std::uint64_t batch_index, int sequences, int k) const;

 private:
  void load(const TokenDataset& data, std::uint64_t first_window);
  void update(float lr, StepStats& s);

  const Deck& deck_;
  Grid& grid_;
  ComputeBackend& backend_;
  const TokenDataset& train_data_;
  const TokenDataset* val_data_;
  GptModel model_;
  DataParallelComm dp_comm_;
  std::unique_ptr<AdamW> optimizer_;  // absent on non-root ranks in gather mode
  bool gather_mode_;
  std::vector<std::int32_t> tokens_, targets_;
  PhaseTimes times_;
};

}  // namespace trident
