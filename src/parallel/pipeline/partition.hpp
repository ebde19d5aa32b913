// Pipeline partitioning, the math: which contiguous blocks each stage owns.
//  - uniform: layers / stages each;
//  - parameters: balance parameter counts (the embeddings weigh on the first
//    stage, the final norm on the last);
//  - profile: PipeDream's dynamic program (Narayanan et al. 2019, section 3.1)
//    over measured per-block forward+backward times plus the time to send the
//    boundary activation, minimising the slowest stage.
#pragma once
#include <string>
#include <vector>

#include "model/stage_spec.hpp"

namespace trident {

struct StageCosts {
  std::vector<double> block;  // cost of each block
  double first = 0;           // extra cost on the first stage (embeddings)
  double last = 0;            // extra cost on the last stage (final norm, head, loss)
  double boundary = 0;        // cost of one stage boundary (activation out + gradient back)
};

// Block boundaries: stage s owns blocks [b[s], b[s+1]); b.size() == stages + 1.
using Partition = std::vector<int>;

// The layers virtual stage `vs` of a partition holds, and whether it has the
// embeddings (the first) or the head (the last).
StageSpec stage_spec_of(const Partition& part, int vs);

Partition partition_uniform(int layers, int stages);
// Minimises max over stages of (its blocks + extras + boundaries); every stage
// gets at least one block.
Partition partition_min_max(const StageCosts& costs, int stages);
// The cost of each stage under a partition (for printing and tests).
std::vector<double> stage_costs(const StageCosts& costs, const Partition& p);
// Exhaustive search (tests): the smallest achievable slowest-stage cost.
double brute_force_min_max(const StageCosts& costs, int stages);

std::string format_partition(const Partition& p);

}  // namespace trident
