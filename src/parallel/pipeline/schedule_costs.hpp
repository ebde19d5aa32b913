// The costs the zero-bubble lists are built from, for a deck's model: the
// bytes of a slot and of a W buffer per virtual stage and of a send buffer
// (the model's own tables) and the durations of F, B and W from their FLOPs, so every rank
// derives the same lists without measuring.
#pragma once
#include "grid/grid_shape.hpp"
#include "io/deck_sections.hpp"
#include "parallel/pipeline/partition.hpp"
#include "parallel/pipeline/schedule.hpp"
#include "model/stage_spec.hpp"

namespace trident {

struct Deck;

// The deck sections the costs read: the model's shape, the batch and
// recompute, the schedule and sequence parallelism, the 16-bit types, the
// ZeRO stage.
struct ScheduleCostDeck {
  const GptConfig& model;
  const TrainSection& train;
  const ParallelSection& parallel;
  const PrecisionSection& precision;
  const ZeroSection& zero;
};
ScheduleCostDeck schedule_cost_deck(const Deck& deck);

// Whether the last stage's B takes the tied head's table gradient and sends
// its share to the first stage after its last B (GptModelOptions::
// table_grads_in_b; TiedJoin::last_input_grad): a tied model over pipeline
// stages whose backward splits, the two ends on different ranks (not a V),
// where that share is final with the last B and its sum is one addition
// (f32 gradients, one replica: no data or context reduction before the sum,
// no ZeRO).
bool tied_table_grads_in_b(const ScheduleCostDeck& deck, const GridShape& shape);

// `partition` over the schedule's virtual stages (2p for zb-v, else p).
ZeroBubbleCosts zero_bubble_costs(const ScheduleCostDeck& deck, const GridShape& shape,
                                  const Partition& partition);

// Bytes of one activation slot of a stage (saved f32 and 16-bit arrays,
// tokens and targets), of one W buffer (what B keeps for W beyond the slot's
// activations only B read) and of one input-gradient send buffer.
double slot_bytes(const ScheduleCostDeck& deck, const GridShape& shape, const StageSpec& spec);
double weight_buffer_bytes(const ScheduleCostDeck& deck, const GridShape& shape, const StageSpec& spec);
double send_buffer_bytes(const ScheduleCostDeck& deck, const GridShape& shape);

}  // namespace trident
