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
//    zb-h1 keeps at most min(p, m) micro-batches' activations on a stage (the
//    peak of 1F1B, on its stage 0) and leaves about a third of its bubble;
//    zb-h2 keeps up to min(2p - 1, m) and leaves only the (p - 1) forwards
//    before the last stage starts, which a synchronous step cannot avoid.
#pragma once
#include <string>
#include <vector>

namespace trident {

enum class ScheduleKind { naive, gpipe, one_f_one_b, interleaved, pipedream, zb_h1, zb_h2 };
ScheduleKind parse_schedule(const std::string& name);  // throws std::invalid_argument
const char* schedule_name(ScheduleKind k);
// Whether the schedule runs B and W as separate actions.
inline bool splits_backward(ScheduleKind k) {
  return k == ScheduleKind::zb_h1 || k == ScheduleKind::zb_h2;
}

// What a backward action computes: both gradients back to back, or one half
// of the zero-bubble split. A micro-batch holds its activations until its W.
enum class BackwardPart { both, input, weights };

struct PipelineAction {
  bool forward = true;
  int micro_batch = 0;
  int chunk = 0;  // model chunk on this rank (interleaved), else 0
  BackwardPart part = BackwardPart::both;  // backward actions only
  bool frees_slot() const { return !forward && part != BackwardPart::input; }
};

// One step's actions; pipedream: its first step from a cold start.
std::vector<PipelineAction> build_schedule(ScheduleKind kind, int stages, int stage,
                                           int micro_batches, int chunks);
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
// The bound each schedule states for max_in_flight on stage s (chunk 0);
// 0 where none is stated (interleaved, pipedream).
int in_flight_bound(ScheduleKind kind, int stages, int stage, int micro_batches);
// Theory: idle fraction of a step for p stages, m micro-batches, v chunks
// (zero bubble: replayed with unit F, B and W, the paper's cost model).
double theoretical_bubble(ScheduleKind kind, int stages, int micro_batches, int chunks);

}  // namespace trident
