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
#include <stdexcept>
#include <string>

#include "core/dtype.hpp"

namespace trident {

enum class Recompute { none, selective, full };

inline Recompute parse_recompute(const std::string& s) {
  if (s == "none") return Recompute::none;
  if (s == "selective") return Recompute::selective;
  if (s == "full") return Recompute::full;
  throw std::invalid_argument("unknown recompute mode '" + s + "'");
}

struct ActivationPolicy {
  Recompute recompute = Recompute::none;
  bool partition = false;    // full recompute, tp > 1 without SP: keep 1/tp of each block input
  DType store = DType::f32;  // type of the saved activations between ops
};

// precision.dtype -> the storage type.
inline DType precision_dtype(const std::string& s) {
  return s == "bf16" ? DType::bf16 : s == "fp16" ? DType::f16 : DType::f32;
}

// The deck's train.recompute, train.partition_activations and
// precision.dtype for a tensor group of `tp` ranks.
inline ActivationPolicy make_activation_policy(const std::string& recompute, bool partition,
                                               int tp, bool sequence_parallel,
                                               const std::string& precision) {
  ActivationPolicy p;
  p.recompute = parse_recompute(recompute);
  p.partition = p.recompute == Recompute::full && partition && tp > 1 && !sequence_parallel;
  p.store = precision_dtype(precision);
  return p;
}

}  // namespace trident
