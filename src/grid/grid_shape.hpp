// The process grid's shape and a rank's place in it, without MPI: what the
// deck, the planner, the checkpoint schema and the cost models read of the
// layout. Tensor ranks are fastest, then data, then pipeline
// (rank = tp + TP*(dp + DP*pp)), so a tensor group stays in a node. The
// communicators of each group are grid/grid.hpp's.
#pragma once

namespace trident {

struct GridShape {
  int tp = 1;
  int dp = 1;
  int pp = 1;
  int size() const { return tp * dp * pp; }
};

struct GridCoord {
  int tp = 0;
  int dp = 0;
  int pp = 0;
};

// Pure mapping between ranks and coordinates (used by the grid and its tests).
inline int grid_rank_of(const GridShape& s, const GridCoord& c) {
  return c.tp + s.tp * (c.dp + s.dp * c.pp);
}

inline GridCoord grid_coord_of(const GridShape& s, int rank) {
  GridCoord c;
  c.tp = rank % s.tp;
  c.dp = (rank / s.tp) % s.dp;
  c.pp = rank / (s.tp * s.dp);
  return c;
}

}  // namespace trident
