// Measured costs for the profile partitioner: a short run of forward+backward
// of one block, of the embeddings and of the head on this rank's backend,
// at the deck's micro-batch size (and tensor layout), plus the time to move
// one stage boundary at the deck's p2p_gbps.
#pragma once
#include "compute/backend.hpp"
#include "grid/grid.hpp"
#include "io/deck.hpp"
#include "parallel/pipeline/partition.hpp"

namespace trident {

StageCosts profile_stage_costs(const Deck& deck, Grid& grid, ComputeBackend& backend);

}  // namespace trident
