#pragma once

namespace trident {

// The part of the model one pipeline stage runs: a range of blocks, plus the
// embeddings on the first stage and the final norm and tied head on the last.
struct StageSpec {
  int first_block = 0;
  int num_blocks = -1;  // -1: all blocks from first_block on
  bool embedding = true;
  bool head = true;
  int blocks(int layers) const { return num_blocks < 0 ? layers - first_block : num_blocks; }
  bool operator==(const StageSpec&) const = default;
};

}  // namespace trident
