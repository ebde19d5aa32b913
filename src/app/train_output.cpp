#include "app/train_output.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>

#include "model/gpt_config.hpp"

namespace trident {
namespace {

// An srun whose --mpi plugin this MPI does not speak starts each task as its
// own one-rank job, silently: say so where Slurm's step has more tasks.
std::string launch_warning(int world_size) {
  const char* tasks = std::getenv("SLURM_STEP_NUM_TASKS");
  const int n = tasks ? std::atoi(tasks) : 0;
  if (world_size != 1 || n <= 1) return "";
  return fmt::format("srun started {} tasks but MPI sees 1 rank, so each task trains alone: "
                     "srun --mpi must name the PMI this MPI speaks (Open MPI: pmix; MPICH and "
                     "its derivatives: pmi2; the jobscripts read SRUN_MPI; docs/cluster.md)", n);
}

}  // namespace

void print_banner(const Deck& deck, Grid& grid, const ComputeBackend& backend,
                  CommBackend comm, const TokenDataset& train, const TokenDataset* val,
                  int threads, const RankPeak& peak, const std::string& backend_warning) {
  if (!grid.is_root()) return;
  const auto& m = deck.model;
  const auto& t = deck.train;
  fmt::print("trident 0.1.0 | deck {} | {} ranks | layout {} (dp mode {})\n", deck.path,
             grid.size(), grid.describe(), choice_name(deck.parallel.dp_mode));
  fmt::print("model: {} layers, d_model {}, {} heads, seq_len {}, vocab {} | {:.3f} M params | "
             "{:.1f} MFLOP/token\n",
             m.layers, m.d_model, m.heads, m.seq_len, m.vocab, gpt_num_parameters(m) / 1e6,
             gpt_flops_per_token(m) / 1e6);
  fmt::print("train: {} steps, batch {} x {} tokens = {} tokens/step, micro_batch {} "
             "({} {}), lr {:g} (warmup {}, min {:g})\n",
             t.steps, t.batch, m.seq_len, std::int64_t(t.batch) * m.seq_len, t.micro_batch,
             t.batch / (grid.shape().dp * t.micro_batch),
             // pipedream updates after every micro-batch instead of accumulating
             deck.parallel.schedule == ScheduleKind::pipedream ? "updates per step"
                                                               : "accumulation steps",
             t.lr, t.warmup, t.min_lr);
  const auto& pr = deck.precision;
  const bool partitioned = t.recompute == Recompute::full && t.partition_activations &&
                           grid.shape().tp > 1 && !deck.parallel.sequence_parallel;
  fmt::print("precision: {} | recompute: {}{}\n",
             pr.dtype == Precision::fp32 ? std::string(choice_name(pr.dtype))
                                : fmt::format("{} weights and activations, fp32 masters, Adam and "
                                              "gradients{}", choice_name(pr.dtype),
                                              pr.dtype == Precision::fp16
                                                  ? fmt::format(", loss scale {:g}", pr.initial_scale)
                                                  : ""),
             choice_name(t.recompute),
             partitioned ? " (block inputs partitioned over the tensor group)" : "");
  fmt::print("data: train {} tokens in {} shard(s){}\n", train.num_tokens(), train.files().size(),
             val ? fmt::format(", val {} tokens", val->num_tokens()) : "");
  fmt::print("compute: {}{} | collectives: {}\n", backend.info().describe(),
             backend.info().name() == "cpu" ? fmt::format(" (threads/rank {})", threads) : "",
             choice_name(comm));
  if (!backend_warning.empty()) fmt::print("warning: {}\n", backend_warning);
  if (const std::string w = launch_warning(grid.size()); !w.empty()) fmt::print("warning: {}\n", w);
  const std::string rate = peak.flops > 0 ? fmt::format("{:.1f} GFLOP/s", peak.flops / 1e9)
                                          : "unknown, MFU not printed";
  fmt::print("peak for MFU: {} per rank ({})\n", rate, peak.source);
}

void print_pipeline(const Deck& deck, Grid& grid, const Trainer& t) {
  if (!grid.is_root() || grid.shape().pp == 1) return;
  const auto& costs = t.predicted_stage_costs();
  const bool seconds = deck.parallel.partition == PartitionMethod::profile;
  std::string c;
  for (double x : costs) c += seconds ? fmt::format(" {:.2f} ms", 1e3 * x) : fmt::format(" {:.2f} M", x / 1e6);
  fmt::print("pipeline: {} stages x {} chunks, schedule {}, {} micro-batches/step; partition {} "
             "({}): blocks {} | predicted stage cost ({}):{}\n",
             grid.shape().pp, deck.parallel.virtual_stages, choice_name(t.schedule()),
             t.micro_batches(), choice_name(deck.parallel.partition),
             seconds ? "measured" : "parameters", format_partition(t.partition()),
             seconds ? "forward+backward" : "parameters", c);
}

// The pipeline bubble: the share of the ranks' time within the schedules'
// span that is not forward or backward work. The span is the slowest rank's
// schedule time: a rank whose schedule ends early (1F1B's last stage) idles
// until the others are done, in the reduction that follows, and that idle
// is bubble too, as the theory counts it.
// Steps after the first only (`before`: the times after it), as for the FOM:
// the first step's one-time costs (first touch, kernel JIT) differ by rank.
void report_bubble(Grid& grid, const Trainer& t, const PhaseTimes& before) {
  const PhaseTimes& p = t.times();
  // Summed over ranks: the passes' busy time, and (every idle second, the
  // same rule for every schedule) the steady steps' wall time (StepWall) less
  // each rank's own work outside the passes (gradient reductions, optimizer).
  const StepWall w = t.step_wall();
  double sums[2] = {p.forward + p.backward - before.forward - before.backward,
                    w.seconds - w.own_work};
  double span = p.pipeline - before.pipeline;
  grid.world().all_reduce(sums, 2, DType::f64, ReduceOp::sum);
  grid.world().all_reduce(&span, 1, DType::f64, ReduceOp::max);
  const double busy = sums[0], steady_wall = sums[1];
  const double floor = t.measured_floor();
  const double steady_floor = t.measured_floor(/*steady=*/true);
  if (!grid.is_root() || grid.shape().pp == 1) return;
  const int chunks = grid.shape().pp > 0 ? int(t.partition().size() - 1) / grid.shape().pp : 1;
  const std::string list =
      t.list_bubble() >= 0 ? fmt::format(" (these lists with their FLOP costs: {:.1f}%)", 100 * t.list_bubble()) : "";
  const bool across = t.defers_stats();
  const std::string floor_text =
      floor >= 0 ? fmt::format("; floor {:.1f}% (these lists under the measured pass costs{})",
                               100 * floor, across ? ", steps back to back with each rank's "
                                                     "measured step tail, no barrier" : "")
                 : "";
  fmt::print("pipeline bubble: measured {:.1f}% of {} ranks x the slowest schedule{}; theory "
             "{:.1f}% for {} with p = {}, m = {}, v = {}{}\n",
             span > 0 ? 100 * (1.0 - busy / (grid.size() * span)) : 0.0, grid.size(), floor_text,
             100 * theoretical_bubble(t.schedule(), grid.shape().pp, t.micro_batches(), chunks),
             choice_name(t.schedule()), grid.shape().pp, t.micro_batches(), chunks, list);
  if (steady_wall > 0)
    fmt::print("pipeline bubble over the steady steps: {:.1f}% (per rank its wall time less its "
               "own reductions and optimizer; every idle second, across step boundaries too){}\n",
               100 * (1.0 - busy / steady_wall),
               steady_floor >= 0 ? fmt::format("; floor {:.1f}% (steps back to back under the "
                                               "measured pass costs and step tails, {} barrier)",
                                               100 * steady_floor, across ? "no" : "with the")
                                 : "");
}

void report_post_validation(Grid& grid, Trainer& t, int steps) {
  const PostValidationCounts c = t.post_validation();
  double copy = 0;  // the undo copy this rank holds
  for (const ModelChunk& ch : t.chunks()) copy += double(ch.engine->undo_bytes());
  double most[4] = {double(c.rolled_back()), double(c.clipped), double(c.skipped), copy};
  double all[2] = {double(c.ahead), double(c.held)};
  grid.world().all_reduce(most, 4, DType::f64, ReduceOp::max);
  grid.world().all_reduce(all, 2, DType::f64, ReduceOp::sum);
  if (!grid.is_root()) return;
  fmt::print("post-validation: {:.0f} of {} steps rolled back ({:.0f} clipped, {:.0f} skipped; "
             "the most on any rank); of the {} ranks' steps {:.0f} taken ahead of the global "
             "check, {:.0f} held for it; undo copy {:.2f} MiB on the rank holding most (in the "
             "optimizer's bytes)\n",
             most[0], steps, most[1], most[2], grid.size(), all[0], all[1], most[3] / (1 << 20));
}

}  // namespace trident
