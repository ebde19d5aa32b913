// trident train: deck -> grid -> backend -> data -> trainer -> loop -> report.
#include <fmt/format.h>
#include <mpi.h>
#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>

#include "app/backends.hpp"
#include "app/commands.hpp"
#include "comm/agree.hpp"
#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"
#include "io/deck.hpp"
#include "io/metrics.hpp"
#include "io/token_shard.hpp"
#include "model/gpt_config.hpp"
#include "train/checkpointer.hpp"
#include "train/report.hpp"
#include "train/trainer.hpp"

namespace trident {
namespace {

// Threads per rank: the cores this rank is bound to, or the node's cores shared
// among the node's ranks when the launcher did not bind.
int pick_threads(const Deck& deck, const Grid& grid) {
  if (deck.system.threads > 0) return deck.system.threads;
  cpu_set_t set;
  CPU_ZERO(&set);
  const int hw = int(std::thread::hardware_concurrency());
  const int bound = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : hw;
  if (bound > 0 && bound < hw) return bound;
  return std::max(1, hw / std::max(1, grid.local_size()));
}

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
  double busy = p.forward + p.backward - before.forward - before.backward;
  double span = p.pipeline - before.pipeline;
  grid.world().all_reduce(&busy, 1, DType::f64, ReduceOp::sum);
  grid.world().all_reduce(&span, 1, DType::f64, ReduceOp::max);
  if (!grid.is_root() || grid.shape().pp == 1) return;
  const int chunks = grid.shape().pp > 0 ? int(t.partition().size() - 1) / grid.shape().pp : 1;
  const std::string list =
      t.list_bubble() >= 0 ? fmt::format(" (these lists with their FLOP costs: {:.1f}%)", 100 * t.list_bubble()) : "";
  fmt::print("pipeline bubble: measured {:.1f}% of {} ranks x the slowest schedule; theory "
             "{:.1f}% for {} with p = {}, m = {}, v = {}{}\n",
             span > 0 ? 100 * (1.0 - busy / (grid.size() * span)) : 0.0, grid.size(),
             100 * theoretical_bubble(t.schedule(), grid.shape().pp, t.micro_batches(), chunks),
             choice_name(t.schedule()), grid.shape().pp, t.micro_batches(), chunks, list);
}

int train(const TrainOptions& o, Communicator& boot) {
  Deck deck;
  GridShape shape;
  run_agreed(boot, [&] {
    deck = load_deck(o.deck, o.overrides);
    if (!o.metrics.empty()) deck.output.metrics = o.metrics;
    shape = resolve_layout(deck, boot.size());
  });
  std::unique_ptr<ComputeBackend> backend;  // outlives the grid's communicators (its stream)
  Grid grid(MPI_COMM_WORLD, shape);
  grid.set_timeout_seconds(deck.system.comm_timeout_s);
  const int threads = pick_threads(deck, grid);
  backend = make_compute_backend(deck, grid, threads);
  const CommBackend comm = connect_communicators(deck, grid, *backend);

  std::unique_ptr<TokenDataset> train_data, val_data;
  run_agreed(grid.world(), [&] {
    train_data = std::make_unique<TokenDataset>(deck.data.train, deck.model.seq_len, "data.train");
    if (!deck.data.val.empty())
      val_data = std::make_unique<TokenDataset>(deck.data.val, deck.model.seq_len, "data.val");
  });
  run_agreed(grid.world(), [&] {
    train_data->check_tokens(deck.model.vocab, grid.world());
    if (val_data) val_data->check_tokens(deck.model.vocab, grid.world());
  });
  MetricsWriter metrics;
  run_agreed(grid.world(), [&] {
    if (grid.is_root() && !deck.output.metrics.empty())
      metrics = MetricsWriter(deck.output.metrics, /*append=*/!o.resume.empty());
  });
  const RankPeak peak = rank_peak(deck, *backend, grid.local_size(), threads);
  print_banner(deck, grid, *backend, comm, *train_data, val_data.get(), threads, peak,
               agreed_warning(grid.world(), backend->info().warning()));

  MemoryLedger ledger;
  TraceRecorder trace;
  Trainer trainer(deck, grid, *backend, ledger, *train_data, val_data.get(),
                  o.trace.empty() ? nullptr : &trace);
  print_pipeline(deck, grid, trainer);
  std::string engine_warning;  // a swap file's fallback, which any rank's disk may need
  for (ModelChunk& ch : trainer.chunks())
    if (engine_warning.empty()) engine_warning = ch.engine->warning();
  engine_warning = agreed_warning(grid.world(), engine_warning);
  if (grid.is_root() && !engine_warning.empty()) fmt::print("warning: {}\n", engine_warning);
  Checkpointer checkpoints(deck, grid, trainer);
  const int first = o.resume.empty() ? 0 : checkpoints.resume(o.resume);
  const int steps = deck.train.steps;
  const double tokens_per_step = double(trainer.tokens_per_step());
  double train_seconds = 0, steady_seconds = 0;
  const double wall0 = now_seconds();
  double val_loss = -1;
  PhaseTimes after_first;  // the timers once the first step is done
  // Count communication from the first step on (set-up checks are not per step).
  for (Communicator* c : {&grid.world(), &grid.data(), &grid.tensor(), &grid.pipeline(),
                          &grid.pipeline_grads(), &grid.model()})
    c->reset_stats();
  for (int step = first; step < steps; ++step) {
    StepStats s = trainer.step(step);
    if (step == first && steps - first > 1) {
      after_first = trainer.times();
      backend->info().reset_kernel_times();  // the table covers the steady steps, as the FOM
    }
    train_seconds += s.seconds;
    if (step > first) steady_seconds += s.seconds;  // the first step pays one-time warm-up costs
    const bool last = step + 1 == steps;
    const int every = deck.train.eval_every;
    const bool eval = val_data && ((every > 0 && (step + 1) % every == 0) || last);
    if (eval) val_loss = trainer.evaluate();
    if (grid.is_root()) {
      const Throughput tp = throughput(deck, grid.size(), tokens_per_step, s.seconds, peak.flops);
      const double avg = step > first ? steady_seconds / (step - first) : s.seconds;
      if ((step + 1) % deck.output.log_every == 0 || last || step == first) {
        fmt::print("{}{}\n", format_step_line(s, steps, tp, ledger.peak_total(), avg * (steps - step - 1)),
                   eval ? fmt::format(" | val {:.4f}", val_loss) : "");
        std::fflush(stdout);
      }
      nlohmann::json rec = {{"step", step + 1},          {"loss", s.loss},
                            {"lr", s.lr},                {"grad_norm", s.grad_norm},
                            {"tokens_per_s", tp.tokens_per_s}, {"step_ms", 1e3 * s.seconds},
                            {"peak_mem_bytes", ledger.peak_total()}};
      if (tp.mfu >= 0) rec["mfu"] = tp.mfu;
      if (trainer.loss_scaler()) rec["loss_scale"] = s.loss_scale, rec["skipped"] = s.skipped;
      if (eval) rec["val_loss"] = val_loss;
      metrics.write(rec);
    }
    if (checkpoints.after_step(step + 1)) {  // a stop signal: saved, now exit cleanly
      trainer.stop_stream(step + 1);
      if (grid.is_root()) fmt::print("{}\n", checkpoints.stop_message());
      return kExitOk;
    }
  }
  const double wall = now_seconds() - wall0;
  report_phase_timers(grid, trainer.times(), wall);
  double host_offload = 0;
  for (ModelChunk& c : trainer.chunks()) host_offload += double(c.engine->host_bytes());
  report_memory(grid, ledger, *backend, host_offload);
  report_communication(grid, std::max(1, steps - first));
  report_bubble(grid, trainer, after_first);
  if (!o.trace.empty()) {
    trace.write(grid.world(), o.trace);
    if (grid.is_root()) fmt::print("trace: {} (open in Perfetto or chrome://tracing)\n", o.trace);
  }
  if (grid.is_root()) fmt::print("{}", backend->info().kernel_report());  // empty unless timing kernels
  if (grid.is_root()) {
    const int ran = steps - first;
    const double secs = ran > 1 ? steady_seconds : train_seconds;
    const double toks = tokens_per_step * (ran > 1 ? ran - 1 : 1);
    const Throughput tp = throughput(deck, grid.size(), toks, secs, peak.flops);
    fmt::print("FOM: {:.1f} tokens/s | {:.1f} tokens/s/rank | MFU {} | {} ranks {} | deck {}\n",
               tp.tokens_per_s, tp.tokens_per_s / grid.size(),
               tp.mfu >= 0 ? fmt::format("{:.2f}%", 100 * tp.mfu) : "n/a", grid.size(),
               grid.describe().substr(0, grid.describe().rfind('-')), deck.path);
  }
  return kExitOk;
}

}  // namespace

int train_command(const TrainOptions& o) {
  auto boot = make_communicator(MPI_COMM_WORLD, "world");
  try {
    return train(o, *boot);
  } catch (const AgreedError& e) {
    if (boot->rank() == 0) fmt::print(stderr, "error: {}\n", e.what());
    return e.exit_code;
  } catch (const std::exception& e) {
    // Only this rank knows: say who, then take the job down rather than let
    // peers wait in a collective until the time limit.
    fmt::print(stderr, "error on rank {}: {}\n", boot->rank(), e.what());
    std::fflush(stderr);
    // Launchers forward output asynchronously; MPICH's tears it down with the
    // job, and under load the line above was lost. Give it a moment.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const int code = dynamic_cast<const InputError*>(&e) ? kExitBadInput : kExitRuntime;
    MPI_Abort(MPI_COMM_WORLD, code);
    return code;
  }
}

}  // namespace trident
