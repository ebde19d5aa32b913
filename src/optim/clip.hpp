// Global gradient norm and clipping. The norm is over the whole model: this
// rank's sum of squares is summed over every group that splits the model
// (tensor and pipeline now; ZeRO shards as they land), never over replicas.
#pragma once
#include <vector>

#include "comm/communicator.hpp"
#include "compute/backend.hpp"
#include "memory/arena.hpp"
#include "memory/tensor_table.hpp"

namespace trident {

// Elements of replicated tensors (split_dim < 0) count once: only where
// `count_replicated` (tensor rank 0); shards count everywhere; padding is zero.
double global_grad_norm(ComputeBackend& backend, const Arena& grads, const TensorTable& table,
                        bool count_replicated, const std::vector<Communicator*>& model_split_groups);

// Scales the gradients by max_norm / (norm + 1e-6) when that is below 1 (the
// PyTorch rule); returns the factor applied (1 when not clipped).
float clip_gradients(ComputeBackend& backend, Arena& grads, double norm, double max_norm);

}  // namespace trident
