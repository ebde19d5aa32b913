#pragma once

namespace trident {

// Which layers a model holds: a range of blocks, plus the embeddings where it
// starts the model and the final norm and tied head where it ends it. A
// pipeline stage runs one (or, interleaved, several); the default is the whole
// model.
struct StageSpec {
  int first_block = 0;
  int num_blocks = -1;  // -1: all blocks from first_block on
  bool embedding = true;
  bool head = true;
  int blocks(int layers) const { return num_blocks < 0 ? layers - first_block : num_blocks; }
  bool operator==(const StageSpec&) const = default;
};

}  // namespace trident
