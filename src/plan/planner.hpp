// Layouts for a deck on N GPUs: one given as tp=8,pp=4,... or every layout the
// deck validator (parse_deck + resolve_layout, as `trident check`) accepts,
// context groups included at long sequences, each with its predicted step
// and memory; one that does not fit the device is tried again with the
// optimizer's state offloaded.
#pragma once
#include <string>
#include <vector>

#include "plan/cluster.hpp"
#include "plan/cost_model.hpp"

namespace trident {

struct PlanRequest {
  std::string deck_path;
  std::string deck_text;               // read once; every candidate re-parses it
  std::vector<std::string> overrides;  // the user's --set
  int gpus = 1;
  // Plan for a framework that keeps the attention probabilities (Megatron-LM
  // without flash attention, as in the published runs) instead of Trident.
  bool stored_attention = false;
};

// "tp=8,pp=4,dp=16[,cp=2],v=2,mb=1,zero=1,sp=1,recompute=selective[,offload=cpu:0.5]"
// as deck overrides. Throws InputError naming the malformed field.
std::vector<std::string> layout_overrides(const std::string& layout);
// A prediction's layout in the same words, so it can be pasted back (cp
// only where there is a context group).
std::string layout_string(const Prediction& p);

// One layout; throws InputError with the validator's message if it is invalid.
Prediction plan_layout(const PlanRequest& request, const std::vector<std::string>& layout,
                       const Cluster& cluster);

// Fastest first, where within 0.5% the simpler layout wins: by predicted
// step, the fastest layout not yet placed leads a group of every layout
// within 0.5% of it; a group lists its layouts simplest first (less ZeRO
// sharding, no or a smaller context group, less memory, then the faster;
// last the layout string), and the groups follow fastest first. The same
// predictions give the same order whatever order they come in.
void order_fastest_first(std::vector<Prediction>& predictions);

struct PlanResult {
  std::vector<Prediction> fitting;     // fastest first
  std::vector<Prediction> too_large;   // fastest first
  int considered = 0, invalid = 0;
};
PlanResult plan_all(const PlanRequest& request, const Cluster& cluster);

}  // namespace trident
