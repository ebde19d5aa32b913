// The process grid's shape and a rank's place in it, without MPI: what the
// deck, the planner, the checkpoint schema and the cost models read of the
// layout. Tensor ranks are fastest, then context, then data, then pipeline
// (rank = tp + TP*(cp + CP*(dp + DP*pp)), Megatron-Core's order), so a tensor
// group stays in a node and a context ring next to it. The communicators of
// each group are grid/grid.hpp's.
#pragma once

namespace trident {

struct GridShape {
  int tp = 1;
  int dp = 1;
  int pp = 1;
  int cp = 1;  // context parallelism: each sequence split over cp ranks
  int size() const { return tp * cp * dp * pp; }
  // The ranks that hold one copy of a weight shard: data x context.
  int replicas() const { return dp * cp; }
};

struct GridCoord {
  int tp = 0;
  int dp = 0;
  int pp = 0;
  int cp = 0;
  // This rank's index among the replicas of its weights (the data x context
  // group): context fastest.
  int replica(const GridShape& s) const { return cp + s.cp * dp; }
};

// Pure mapping between ranks and coordinates (used by the grid and its tests).
inline int grid_rank_of(const GridShape& s, const GridCoord& c) {
  return c.tp + s.tp * (c.cp + s.cp * (c.dp + s.dp * c.pp));
}

inline GridCoord grid_coord_of(const GridShape& s, int rank) {
  GridCoord c;
  c.tp = rank % s.tp;
  c.cp = (rank / s.tp) % s.cp;
  c.dp = (rank / (s.tp * s.cp)) % s.dp;
  c.pp = rank / (s.tp * s.cp * s.dp);
  return c;
}

}  // namespace trident
