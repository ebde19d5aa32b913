// trident: one SPMD binary, launched by srun or mpirun on every rank.
//   trident train DECK.toml [--set section.key=value]... [--metrics FILE.jsonl]
//                 [--trace FILE.json] [--resume PATH|latest]
//   trident estimate DECK.toml --world N [--set section.key=value]... [--memory 80GiB]
//   trident check DECK.toml --ranks N [--set section.key=value]... [--layouts FILE] [--json]
//   trident plan DECK.toml --gpus N [--cluster NAME|FILE.toml] [--set ...]... [--top K]
//                [--layout tp=8,pp=4,dp=16,v=2,mb=1,zero=1,sp=1,recompute=selective[,offload=cpu]] [--json]
//                [--stored-attention]
//   trident tokenize IN.txt OUT.bin
//   trident deck --reference
//   trident inspect CHECKPOINT.h5
#include <mpi.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "io/deck_reader.hpp"
#include "io/deck_reference.hpp"
#include "train/stop_signal.hpp"

namespace {

int run(int argc, char** argv, int rank) {
  using namespace trident;
  CLI::App app{"Trident: data/tensor/pipeline-parallel GPT training for MPI clusters", "trident"};
  app.set_version_flag("--version", "trident 0.1.0");
  app.require_subcommand(1);

  TrainOptions train;
  CLI::App* train_cmd = app.add_subcommand("train", "Train the model an input deck describes");
  train_cmd->add_option("deck", train.deck, "Input deck (TOML)")->required();
  train_cmd->add_option("--set", train.overrides,
                        "Override a deck key: section.key=value (repeatable)");
  train_cmd->add_option("--metrics", train.metrics, "Write per-step metrics as JSON Lines here");
  train_cmd->add_option("--trace", train.trace,
                        "Write a Chrome trace (Perfetto, chrome://tracing) of every rank here");
  train_cmd->add_option("--resume", train.resume,
                        "Continue from a checkpoint file, or 'latest' in checkpoint.dir");

  EstimateOptions est;
  CLI::App* est_cmd = app.add_subcommand(
      "estimate", "Memory per rank for each ZeRO stage, before running (one process)");
  est_cmd->add_option("deck", est.deck, "Input deck (TOML)")->required();
  est_cmd->add_option("--world", est.world, "Ranks of the planned job")->required();
  est_cmd->add_option("--set", est.overrides, "Override a deck key: section.key=value");
  est_cmd->add_option("--memory", est.memory, "Memory per rank, e.g. 80GiB: does the peak fit?");

  CheckOptions check;
  CLI::App* check_cmd = app.add_subcommand(
      "check", "Validate a deck for a job of N ranks exactly as train does (one process)");
  check_cmd->add_option("deck", check.deck, "Input deck (TOML)")->required();
  check_cmd->add_option("--ranks", check.ranks, "Ranks of the planned job");
  check_cmd->add_option("--set", check.overrides, "Override a deck key: section.key=value");
  check_cmd->add_option("--layouts", check.layouts,
                        "File (or -) with one layout per line: section.key=value words and "
                        "optionally ranks=N; prints one JSON verdict per line");
  check_cmd->add_flag("--json", check.json, "Print the verdict as one JSON object");

  PlanOptions plan;
  CLI::App* plan_cmd = app.add_subcommand(
      "plan", "Predict step time and memory per layout on a cluster and pick one (one process)");
  plan_cmd->add_option("deck", plan.deck, "Input deck (TOML)")->required();
  plan_cmd->add_option("--gpus", plan.gpus, "GPUs (ranks) of the planned job")->required();
  plan_cmd->add_option("--cluster", plan.cluster,
                       "dgx-a100-80gb (default), dgx-a100-40gb, dgx-h100, dgx-h200, this-cpu, "
                       "or a cluster .toml file");
  plan_cmd->add_option("--set", plan.overrides, "Override a deck key: section.key=value");
  plan_cmd->add_option("--top", plan.top, "How many layouts to list (default 5)");
  plan_cmd->add_option("--layout", plan.layout,
                       "Predict one layout: tp=8,pp=4,dp=16,v=2,mb=1,zero=1,sp=1,"
                       "recompute=selective[,offload=none|cpu|cpu:RATIO|nvme]");
  plan_cmd->add_flag("--json", plan.json, "Print the plan as one JSON document");
  plan_cmd->add_flag("--stored-attention", plan.stored_attention,
                     "Model a framework that keeps the attention probabilities (Megatron-LM "
                     "without flash attention) instead of Trident");

  TokenizeOptions tok;
  CLI::App* tok_cmd =
      app.add_subcommand("tokenize", "Turn a text file into a token shard (byte-level, vocab 257)");
  tok_cmd->add_option("input", tok.input, "Text file, or - for standard input")->required();
  tok_cmd->add_option("output", tok.output, "Token shard to write (.bin)")->required();

  bool deck_reference = false;
  CLI::App* deck_cmd = app.add_subcommand("deck", "Describe the input deck's keys");
  deck_cmd->add_flag("--reference", deck_reference,
                     "Print every key with its type, default and meaning (Markdown)")
      ->required();

  InspectOptions inspect;
  CLI::App* inspect_cmd =
      app.add_subcommand("inspect", "Print a checkpoint's step, layout, deck and datasets");
  inspect_cmd->add_option("checkpoint", inspect.checkpoint, "Checkpoint file (.h5)")->required();

  // CLI11 reads an unknown first word as a missing subcommand: name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      const std::string near = closest_name(argv[1], names);
      if (rank == 0)
        std::fprintf(stderr, "error: unknown subcommand '%s'%s; subcommands: %s (see trident --help)\n",
                     argv[1], near.empty() ? "" : (" (did you mean '" + near + "'?)").c_str(),
                     fmt::format("{}", fmt::join(names, ", ")).c_str());
      return kExitBadInput;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every rank parses the same arguments, so every rank agrees; rank 0 speaks.
    if (e.get_exit_code() == 0) {  // --help, --version
      if (rank == 0) app.exit(e);
      return kExitOk;
    }
    if (rank == 0) std::fprintf(stderr, "error: %s (see trident --help)\n", e.what());
    return kExitBadInput;
  }
  if (*train_cmd) return train_command(train);
  if (*tok_cmd) return rank == 0 ? tokenize_command(tok) : kExitOk;
  if (*est_cmd) return rank == 0 ? estimate_command(est) : kExitOk;
  if (*plan_cmd) return rank == 0 ? plan_command(plan) : kExitOk;
  if (*check_cmd) return rank == 0 ? check_command(check) : kExitOk;
  if (*deck_cmd) {
    if (rank == 0) std::fputs(deck_reference_markdown().c_str(), stdout);
    return kExitOk;
  }
  if (*inspect_cmd) return rank == 0 ? inspect_command(inspect) : kExitOk;
  return kExitBadInput;
}

}  // namespace

int main(int argc, char** argv) {
  trident::watch_stop_signals();  // before MPI_Init: no thread of the process takes them
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int code = run(argc, argv, rank);
  MPI_Finalize();
  return code;
}
