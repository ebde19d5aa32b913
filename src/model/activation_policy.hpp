// What a block keeps of its forward for backward, and in which type.
//  - none: every activation backward reads is saved per micro-batch;
//  - selective: Korthikanti et al. (2022, section 5) drop the attention
//    probabilities (heads x T x T per sequence) and recompute them. Flash
//    attention never keeps them (a log-sum-exp per query and head, and
//    backward recomputes the probabilities in every mode), so selective keeps
//    exactly what none keeps: the mode stays valid and costs nothing extra;
//  - full: only each block's input (the residual stream) is saved; backward
//    reruns the block's forward from it, one block at a time (Chen et al.
//    2016). Partitioned (ZeRO-R, Rajbhandari et al. 2020, section 6.1): under
//    tensor parallelism without SP every tensor rank would hold the same
//    input, so each keeps 1/tp of its tokens and the group all-gathers them
//    before the recompute.
// Whatever is not saved lives in a working buffer of one block. The residual
// stream, the norm and softmax statistics and the head's logits stay in f32;
// the rest of the saved activations are stored in `store` (f32, bf16 or f16).
#pragma once
#include "core/dtype.hpp"
#include "io/deck_choices.hpp"

namespace trident {

struct ActivationPolicy {
  Recompute recompute = Recompute::none;
  bool partition = false;    // full recompute, tp > 1 without SP: keep 1/tp of each block input
  DType store = DType::f32;  // type of the saved activations between ops
};

// The deck's train.recompute, train.partition_activations and
// precision.dtype for a tensor group of `tp` ranks.
inline ActivationPolicy make_activation_policy(Recompute recompute, bool partition, int tp,
                                               bool sequence_parallel, Precision precision) {
  ActivationPolicy p;
  p.recompute = recompute;
  p.partition = recompute == Recompute::full && partition && tp > 1 && !sequence_parallel;
  p.store = precision_dtype(precision);
  return p;
}

}  // namespace trident
