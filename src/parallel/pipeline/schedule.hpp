// Pipeline schedules, the math: the ordered forward (F) and backward (B)
// passes one stage runs for one step. Communication is in pipeline_comm.
//  - naive: each micro-batch goes all the way forward and back before the
//    next starts: one stage works at a time (plain model parallelism);
//  - gpipe: all forwards, then all backwards (Huang et al. 2019);
//  - 1f1b: warm-up forwards, then one forward one backward, then cool-down
//    backwards (PipeDream-Flush, Narayanan et al. 2021): at most
//    stages - stage micro-batches in flight instead of m;
//  - interleaved: 1F1B over v model chunks per rank (Megatron-LM, Narayanan et
//    al. 2021, section 2.2): chunk c of stage s is virtual stage c*p + s;
//  - pipedream: asynchronous 1F1B with weight stashing (Narayanan et al. 2019):
//    one continuous stream over global micro-batch g = step*m + i, never
//    flushed; stage s runs p - s - 1 forwards ahead of its backwards, so p - s
//    micro-batches (and weight versions) are in flight on it;
//  - zb-h1, zb-h2: zero bubble (Qi et al. 2024): each backward split into B
//    (the input gradient the previous stage waits for) and W (the weight
//    gradients nobody waits for), and W placed in what would be bubbles.
//    zb-h1 keeps 1F1B's peak activation memory (stage 0's p micro-batches,
//    W buffers included in the byte budget): every stage may hold up to p,
//    so the later ones defer W while their B ripple back (section 3.2), and
//    leaves about a third of 1F1B's bubble; zb-h2 keeps up to min(2p - 1, m)
//    and leaves only the (p - 1) forwards before the last stage starts,
//    which a synchronous step cannot avoid; zb-v runs two chunks per rank in a V (rank s holds virtual
//    stages s and 2p - 1 - s, section 6) within 1F1B's peak memory.
#pragma once
#include <vector>

#include "io/deck_choices.hpp"

namespace trident {

// Whether the schedule places a rank's two chunks in a V (zb-v): chunk 0 of
// rank s is virtual stage s, chunk 1 is 2p - 1 - s, so the embedding and the
// head share rank 0. Elsewhere chunk c of rank s is virtual stage c * p + s.
inline bool places_chunks_in_v(ScheduleKind k) { return k == ScheduleKind::zb_v; }
inline int virtual_stage_of(bool v_shape, int stages, int stage, int chunk) {
  return v_shape && chunk == 1 ? 2 * stages - 1 - stage : chunk * stages + stage;
}
inline int rank_of_virtual_stage(bool v_shape, int stages, int vs) {
  return v_shape && vs >= stages ? 2 * stages - 1 - vs : vs % stages;
}

// What a backward action computes: both gradients back to back, or one half
// of the zero-bubble split. A micro-batch holds its activations until its W.
enum class BackwardPart { both, input, weights };

struct PipelineAction {
  bool forward = true;
  int micro_batch = 0;
  int chunk = 0;  // model chunk on this rank (interleaved), else 0
  BackwardPart part = BackwardPart::both;  // backward actions only
  // Forwards of the zero-bubble lists: the activation slot they take, fixed
  // when the list is built (-1: any free one). A slot is free again once its
  // W has run.
  int slot = -1;
  // Backwards of the zero-bubble lists that send an input gradient: the send
  // buffer of the rank's pool it is written to (-1: its slot's own, see
  // send_buffer_pool). A send buffer is free again once the B that receives
  // from it (on the previous virtual stage) has posted its receive.
  int send_buffer = -1;
  bool frees_slot() const { return !forward && part != BackwardPart::input; }
  bool operator==(const PipelineAction&) const = default;
};

// What the zero-bubble lists are built from (Qi et al. 2024, section 3: the
// heuristic takes T_F, T_B, T_W and the memory each pass holds). Per virtual
// stage: durations of its F, B and W (any unit, identical on every rank), the
// bytes of one activation slot and of one W buffer (the output gradients B
// keeps for W). Per rank: the bytes its slots, W buffers and send buffers may
// take. A send buffer holds one input gradient, a boundary tensor of the
// same size on every stage.
struct ZeroBubbleCosts {
  std::vector<double> f, b, w, slot_bytes, w_bytes, budget;
  double send_bytes = 0;
};
// Unit durations; a slot of a whole stage 1, a W buffer kUnitWeightBuffer of
// it, a send buffer kUnitSendBuffer; budgets as the schedule states.
ZeroBubbleCosts unit_costs(ScheduleKind kind, int stages, int chunks);
// B keeps W's inputs over the activations only B read (GptModel::
// weight_input_layout): in fp32 without recompute they fit, and the W buffer
// is empty (16-bit stores and recompute keep less in the f32 slot to free).
constexpr double kUnitWeightBuffer = 0;
// The paper's model leaves the boundary tensors out.
constexpr double kUnitSendBuffer = 0;
// The budget each schedule states for rank s, from the bytes of a slot of
// each 1F1B stage (one chunk per rank): zb-h1 and zb-v 1F1B's peak over the
// ranks + 5%; zb-h2 none (0).
double zero_bubble_budget(ScheduleKind kind, int stage, const std::vector<double>& one_f_one_b_slot);
constexpr double kZeroBubbleSlack = 1.05;  // room for a W buffer where a slot's worth is traded

// One step's actions; pipedream: its first step from a cold start. Zero
// bubble: from `costs` (null: unit_costs).
std::vector<PipelineAction> build_schedule(ScheduleKind kind, int stages, int stage,
                                           int micro_batches, int chunks,
                                           const ZeroBubbleCosts* costs = nullptr);
// All ranks' zero-bubble lists (schedule_zero_bubble.cpp).
std::vector<std::vector<PipelineAction>> zero_bubble_schedule(ScheduleKind kind, int stages,
                                                              int micro_batches,
                                                              const ZeroBubbleCosts& costs);
// Pipedream, step `step` of the stream, micro-batches numbered globally
// (step * m + i): with `warm_up` (the stream's first step, also after a
// resume) the p - s - 1 forwards that run ahead first, then m pairs
// F(g + p - s - 1), B(g) over the step's g. Forwards of micro-batches at or
// past `end` (the run's last) are left out: there is no data for them.
std::vector<PipelineAction> pipedream_actions(int stages, int stage, int micro_batches, int step,
                                              bool warm_up, long long end);
// Micro-batches in flight on a stage under pipedream: its forwards ahead + 1.
inline int pipedream_in_flight(int stages, int stage) { return stages - stage; }
// The most micro-batches a chunk holds activations for at once under `actions`.
int max_in_flight(const std::vector<PipelineAction>& actions, int chunk);
// The activation slots a chunk allocates: max_in_flight, or the most the
// list assigns.
int activation_slots(const std::vector<PipelineAction>& actions, int chunk);
// The most micro-batches of a chunk whose B has run and W not: W buffers.
int max_pending_weights(const std::vector<PipelineAction>& actions, int chunk);
// A rank's pool of input-gradient send buffers, shared by its chunks: as
// many as the list names, or, where it names none, one per activation slot
// of each chunk that sends (`sends[c]`: chunk c is not the first virtual
// stage), slot k of chunk c writing to first[c] + k.
struct SendBufferPool {
  int size = 0;
  std::vector<int> first;  // per chunk; empty where the list names the buffers
  int of(const PipelineAction& a, int slot) const {
    return first.empty() ? a.send_buffer : first[std::size_t(a.chunk)] + slot;
  }
  bool operator==(const SendBufferPool&) const = default;
};
SendBufferPool send_buffer_pool(const std::vector<PipelineAction>& actions,
                                const std::vector<bool>& sends);
// The bound each schedule states for max_in_flight on stage s (chunk 0);
// 0 where none is stated (interleaved, pipedream).
int in_flight_bound(ScheduleKind kind, int stages, int stage, int micro_batches);
// Theory: idle fraction of a step for p stages, m micro-batches, v chunks
// (zero bubble: replayed with unit F, B and W, the paper's cost model; zb-v
// has two chunks whatever `chunks` says).
double theoretical_bubble(ScheduleKind kind, int stages, int micro_batches, int chunks);

}  // namespace trident
