// Pipeline schedules, the math: the ordered forward (F) and backward (B)
// passes one stage runs for one step. Communication is in pipeline_comm.
//  - naive: each micro-batch goes all the way forward and back before the
//    next starts: one stage works at a time (plain model parallelism);
//  - gpipe: all forwards, then all backwards (Huang et al. 2019);
//  - 1f1b: warm-up forwards, then one forward one backward, then cool-down
//    backwards (PipeDream-Flush, Narayanan et al. 2021): at most
//    stages - stage micro-batches in flight instead of m;
//  - interleaved: 1F1B over v model chunks per rank (Megatron-LM, Narayanan et
//    al. 2021, section 2.2): chunk c of stage s is virtual stage c*p + s.
#pragma once
#include <string>
#include <vector>

namespace trident {

enum class ScheduleKind { naive, gpipe, one_f_one_b, interleaved };
ScheduleKind parse_schedule(const std::string& name);  // throws std::invalid_argument
const char* schedule_name(ScheduleKind k);

struct PipelineAction {
  bool forward = true;
  int micro_batch = 0;
  int chunk = 0;  // model chunk on this rank (interleaved), else 0
};

std::vector<PipelineAction> build_schedule(ScheduleKind kind, int stages, int stage,
                                           int micro_batches, int chunks);
// The most micro-batches a chunk holds activations for at once under `actions`.
int max_in_flight(const std::vector<PipelineAction>& actions, int chunk);
// Theory: idle fraction of a step for p stages, m micro-batches, v chunks.
double theoretical_bubble(ScheduleKind kind, int stages, int micro_batches, int chunks);

}  // namespace trident
