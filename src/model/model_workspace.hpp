// The working buffer (a block's activations that are not saved) and the
// scratch of a model's passes. Nothing in them outlives a pass, and the chunks
// of one rank run one pass at a time, so they may share one workspace
// (GptModelOptions::workspace): the first model built allocates it.
#pragma once
#include "memory/arena.hpp"

namespace trident {

struct ModelWorkspace {
  Arena work, scratch;
};

}  // namespace trident
