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
#include "app/train_output.hpp"
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

// The training and validation tokens, checked against the vocabulary on every rank.
struct Datasets {
  std::unique_ptr<TokenDataset> train, val;
};

Datasets open_datasets(const Deck& deck, Grid& grid) {
  Datasets d;
  run_agreed(grid.world(), [&] {
    d.train = std::make_unique<TokenDataset>(deck.data.train, deck.model.seq_len, "data.train");
    if (!deck.data.val.empty())
      d.val = std::make_unique<TokenDataset>(deck.data.val, deck.model.seq_len, "data.val");
  });
  run_agreed(grid.world(), [&] {
    d.train->check_tokens(deck.model.vocab, grid.world());
    if (d.val) d.val->check_tokens(deck.model.vocab, grid.world());
  });
  return d;
}

// A swap file's fallback, which any rank's disk may need: said once.
void print_engine_warning(Grid& grid, Trainer& trainer) {
  std::string warning;
  for (ModelChunk& ch : trainer.chunks())
    if (warning.empty()) warning = ch.engine->warning();
  warning = agreed_warning(grid.world(), warning);
  if (grid.is_root() && !warning.empty()) fmt::print("warning: {}\n", warning);
}

// What the loop leaves for the report.
struct LoopTimes {
  double train_seconds = 0;   // every step
  double steady_seconds = 0;  // the steps after the first, which pays one-time warm-up costs
  double wall = 0;
  PhaseTimes after_first;     // the timers once the first step is done
  bool stopped = false;       // a stop signal: saved, the run exits cleanly
  double checkpoint_staging = 0;  // checkpoint.async: the most host memory a save held
};

// Rank 0: the step's line every output.log_every steps (and the first and
// last), and its metrics record. steady_seconds: the steps after the first
// up to this one.
void record_step(const Deck& deck, Grid& grid, Trainer& trainer, const MemoryLedger& ledger,
                 MetricsWriter& metrics, const RankPeak& peak, const StepStats& s, int first,
                 double steady_seconds, double val_loss, bool eval) {
  const int step = s.step, steps = deck.train.steps;
  const bool last = step + 1 == steps;
  const Throughput tp = throughput(deck, grid.size(), double(trainer.tokens_per_step()), s.seconds,
                                   peak.flops);
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
  if (deck.parallel.post_validation) rec["rolled_back"] = s.rolled_back;
  if (eval) rec["val_loss"] = val_loss;
  metrics.write(rec);
}

// Steps `first` to train.steps, evaluating every train.eval_every and at the
// end; stops early, saved, on a stop signal.
LoopTimes run_steps(const Deck& deck, Grid& grid, ComputeBackend& backend, Trainer& trainer,
                    Checkpointer& checkpoints, const MemoryLedger& ledger, MetricsWriter& metrics,
                    const RankPeak& peak, bool validate, int first) {
  const int steps = deck.train.steps;
  LoopTimes loop;
  const double wall0 = now_seconds();
  double val_loss = -1;
  // Count communication from the first step on (set-up checks are not per step).
  for (Communicator* c : {&grid.world(), &grid.data(), &grid.tensor(), &grid.pipeline(),
                          &grid.pipeline_grads(), &grid.model(), &grid.context(),
                          &grid.data_context()})
    c->reset_stats();
  for (int step = first; step < steps; ++step) {
    StepStats s = trainer.step(step);
    if (step == first && steps - first > 1) {
      loop.after_first = trainer.times();
      backend.info().reset_kernel_times();  // the table covers the steady steps, as the FOM
    }
    const double steady_before = loop.steady_seconds;
    loop.train_seconds += s.seconds;
    if (step > first) loop.steady_seconds += s.seconds;
    const int every = deck.train.eval_every;
    const bool eval = validate && ((every > 0 && (step + 1) % every == 0) || step + 1 == steps);
    // Post-validation: a step's stats arrive with the next step's settle;
    // whatever reads the settled state settles first: evaluation, the last
    // step, a save (the checkpointer's per-step agreement is then posted
    // at one boundary and read at the next: no barrier either).
    if (eval || step + 1 == steps || (trainer.defers_stats() && checkpoints.save_due(step + 1)))
      trainer.settle();
    if (eval) val_loss = trainer.evaluate();
    const std::vector<StepStats> settled =
        trainer.defers_stats() ? trainer.take_settled() : std::vector<StepStats>{s};
    for (const StepStats& d : settled)
      if (grid.is_root())
        record_step(deck, grid, trainer, ledger, metrics, peak, d, first,
                    d.step == step ? loop.steady_seconds : steady_before, val_loss,
                    eval && d.step == step);
    if (checkpoints.after_step(step + 1)) {  // a stop signal: saved, now exit cleanly
      trainer.stop_stream(step + 1);
      if (grid.is_root()) fmt::print("{}\n", checkpoints.stop_message());
      loop.stopped = true;
      return loop;
    }
  }
  loop.wall = now_seconds() - wall0;
  loop.checkpoint_staging = double(checkpoints.staging_peak());
  return loop;
}

// After the last step: phase timers, memory, communication, the bubble, the
// trace, the kernel table and the figure of merit.
void report_run(const TrainOptions& o, const Deck& deck, Grid& grid, ComputeBackend& backend,
                Trainer& trainer, const MemoryLedger& ledger, TraceRecorder& trace,
                const RankPeak& peak, const LoopTimes& loop, int first) {
  const int steps = deck.train.steps;
  report_phase_timers(grid, trainer.times(), loop.wall);
  double host_offload = 0;
  for (ModelChunk& c : trainer.chunks()) host_offload += double(c.engine->host_bytes());
  report_memory(grid, ledger, backend, host_offload, loop.checkpoint_staging);
  report_communication(grid, std::max(1, steps - first));
  report_bubble(grid, trainer, loop.after_first);
  if (deck.parallel.post_validation) report_post_validation(grid, trainer, steps - first);
  if (!o.trace.empty()) {
    trace.write(grid.world(), o.trace);
    if (grid.is_root()) fmt::print("trace: {} (open in Perfetto or chrome://tracing)\n", o.trace);
  }
  if (grid.is_root()) fmt::print("{}", backend.info().kernel_report());  // empty unless timing kernels
  if (grid.is_root()) {
    const int ran = steps - first;
    const double secs = ran > 1 ? loop.steady_seconds : loop.train_seconds;
    const double toks = double(trainer.tokens_per_step()) * (ran > 1 ? ran - 1 : 1);
    const Throughput tp = throughput(deck, grid.size(), toks, secs, peak.flops);
    fmt::print("FOM: {:.1f} tokens/s | {:.1f} tokens/s/rank | MFU {} | {} ranks {} | deck {}\n",
               tp.tokens_per_s, tp.tokens_per_s / grid.size(),
               tp.mfu >= 0 ? fmt::format("{:.2f}%", 100 * tp.mfu) : "n/a", grid.size(),
               grid.describe().substr(0, grid.describe().rfind('-')), deck.path);
  }
}

// Set-up (deck, grid, backend, data, trainer, checkpoints), the loop, the report.
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
  const Datasets data = open_datasets(deck, grid);
  MetricsWriter metrics;
  run_agreed(grid.world(), [&] {
    if (grid.is_root() && !deck.output.metrics.empty())
      metrics = MetricsWriter(deck.output.metrics, /*append=*/!o.resume.empty());
  });
  const RankPeak peak = rank_peak(deck, *backend, grid.local_size(), threads);
  print_banner(deck, grid, *backend, comm, *data.train, data.val.get(), threads, peak,
               agreed_warning(grid.world(), backend->info().warning()));

  MemoryLedger ledger;
  TraceRecorder trace;
  Trainer trainer(deck, grid, *backend, ledger, *data.train, data.val.get(),
                  o.trace.empty() ? nullptr : &trace);
  print_pipeline(deck, grid, trainer);
  print_engine_warning(grid, trainer);
  Checkpointer checkpoints(deck, grid, trainer);
  const int first = o.resume.empty() ? 0 : checkpoints.resume(o.resume);
  const LoopTimes loop = run_steps(deck, grid, *backend, trainer, checkpoints, ledger, metrics,
                                   peak, data.val != nullptr, first);
  if (!loop.stopped) report_run(o, deck, grid, *backend, trainer, ledger, trace, peak, loop, first);
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
