// A schedule's per-rank action lists run against each other: the validator
// the unit tests apply to every schedule (each micro-batch's F, B and W once
// per virtual stage and in order, every send matched by a receive, no rank
// waiting forever, activations within the schedule's stated bound), and the
// replay with unit costs the zero-bubble theory uses.
#pragma once
#include <string>
#include <vector>

#include "parallel/pipeline/schedule.hpp"

namespace trident {

struct ScheduleReplay {
  long long makespan = 0;  // in units of one F (B and W one each, both two)
  double time = 0;         // the makespan with `costs`' durations, where given
  std::string deadlock;    // empty, or which rank waits at which action
  // Empty, or the first pass that had to wait for a buffer it names to be
  // free: a B for the receive of the gradient last sent from its send
  // buffer, an F for the receive of the activation last sent from its slot.
  // Lists built around those receives never wait for them.
  std::string early_reuse;
};

// Where the tied embedding's two copies (first and last rank) join in a
// step: not at all (untied, or both ends on one rank in a V); each end's
// share summed once its last pass is done; or the last rank's share taken in
// its B passes and sent after its last B, while the first rank's is done
// with its last pass (its table's gradient comes in W).
enum class TiedJoin { none, last_pass, last_input_grad };

// Consecutive steps in one replay (steady_bubble, schedule_steps.cpp): each
// rank's list repeats, step_len actions a step, and a rank's step ends with
// `tail` of its own work (reductions, optimizer). barrier: the synchronous
// step, where a rank starts the next step only once every rank has ended its
// passes, after its own tail. Else post-validation: each rank goes on after
// its own tail, and settles the previous step, which needs every rank's tail
// done, before its first send (the first virtual stage, which computes a
// forward ahead of it) or its first computation (the others). share_at (tied
// embedding; empty when untied): per rank, the index in its step's list of
// the pass after which its share of the tied gradient is final; the first
// and last ranks each begin their tail once their own passes are done and
// the other end's share is.
class StepJoins {
 public:
  StepJoins(std::vector<std::size_t> step_len, std::vector<double> tail, bool barrier, int steps,
            std::vector<std::size_t> share_at = {});
  // Where action i of rank s, free from `start`, may run.
  struct Join {
    bool wait = false;     // another rank's step end is not replayed yet
    double start = 0;      // `start` raised to the step's join
    double leave_at = 0;   // a forward computed ahead of the settle leaves only then
    bool settles = false;  // the rank settles at this action
  };
  Join before(int s, std::size_t i, bool speculative, double start) const;
  void after(int s, std::size_t i, double end, bool settles);  // action i ended at `end`
  double ended(int step, int s) const { return ended_[std::size_t(step)][std::size_t(s)]; }

 private:
  double tail_from(std::size_t k, std::size_t r) const;  // when rank r's tail of step k begins
  std::vector<std::size_t> step_len_;
  std::vector<double> tail_;
  bool barrier_;
  std::vector<std::size_t> share_at_;
  std::vector<std::vector<double>> ended_;  // per step and rank, its last pass's end (-1: not yet)
  std::vector<std::vector<double>> shared_;  // per step and rank, its tied share's end
  std::vector<std::vector<bool>> settled_;  // per step and rank
};

// Per rank, where its tied share is final (StepJoins' share_at) under `join`.
std::vector<std::size_t> tied_share_at(const std::vector<std::vector<PipelineAction>>& ranks,
                                       TiedJoin join);

// Each rank's actions (rank s runs virtual stages c * p + s, or the V's s and
// 2p - 1 - s), started as soon as their input has arrived: receives block,
// sends do not, and a B that names its send buffer waits, as the trainer
// does after its own receive, until the B that receives the gradient last sent
// from that buffer has posted its receive (its rank has reached it). With
// `costs`, each pass takes its virtual stage's time.
// A pass's duration at virtual stage vs: costs' F, B, W (B + W fused), or
// without costs one unit each (fused two).
double pass_duration(const PipelineAction& a, int vs, const ZeroBubbleCosts* costs);

ScheduleReplay replay_schedule(const std::vector<std::vector<PipelineAction>>& ranks, int chunks,
                               bool v_shape = false, const ZeroBubbleCosts* costs = nullptr,
                               StepJoins* joins = nullptr);

// The idle share of the ranks' time when `ranks` run with `costs`' durations:
// 1 - (the passes' time) / (ranks x the replay's makespan).
double replayed_bubble(const std::vector<std::vector<PipelineAction>>& ranks, int chunks,
                       bool v_shape, const ZeroBubbleCosts& costs);

// The steady idle share per step of `steps` consecutive steps (StepJoins):
// 1 - (every rank's passes of a step) / (the ranks' steady period, each less
// its own tail), the period taken over the second half of the steps. With a
// barrier and no tails it is replayed_bubble.
double steady_bubble(const std::vector<std::vector<PipelineAction>>& ranks, int chunks,
                     bool v_shape, const ZeroBubbleCosts& costs, const std::vector<double>& tail,
                     bool barrier, int steps = 8, TiedJoin tied = TiedJoin::none);

// Empty when, between every pair of ranks and in each direction (activations
// forward, gradients back), the receiver's list takes the messages in the
// order the sender's list sends them, as a backend without tags (NCCL)
// pairs them; else the first pair that differs.
std::string message_order_problem(const std::vector<std::vector<PipelineAction>>& ranks,
                                  int chunks, bool v_shape);

// Empty when build_schedule's lists for every rank are sound; else the first
// problem found. Zero bubble (unit costs): each B that sends names a send
// buffer, each rank's slots, W and send buffers stay within its budget, and
// no slot or send buffer is reused before what was sent from it is received
// (the replay's early_reuse); every list: message_order_problem finds nothing.
std::string validate_schedule(ScheduleKind kind, int stages, int micro_batches, int chunks);

}  // namespace trident
