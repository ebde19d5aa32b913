// What `trident train` prints around the loop: the banner before it, the
// pipeline's partition once the trainer is built, the bubble after it.
#pragma once
#include <string>

#include "app/backends.hpp"
#include "compute/backend.hpp"
#include "grid/grid.hpp"
#include "io/deck.hpp"
#include "io/token_shard.hpp"
#include "train/report.hpp"
#include "train/trainer.hpp"

namespace trident {

void print_banner(const Deck& deck, Grid& grid, const ComputeBackend& backend,
                  CommBackend comm, const TokenDataset& train, const TokenDataset* val,
                  int threads, const RankPeak& peak, const std::string& backend_warning);
void print_pipeline(const Deck& deck, Grid& grid, const Trainer& t);
// The pipeline bubble over the steps after the first (`before`: the times after it).
void report_bubble(Grid& grid, const Trainer& t, const PhaseTimes& before);
// parallel.post_validation: the steps rolled back (the most on any rank) and
// the ranks' steps taken ahead and held, over `steps` steps.
void report_post_validation(Grid& grid, Trainer& t, int steps);

}  // namespace trident
