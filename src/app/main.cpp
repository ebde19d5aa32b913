// trident: one SPMD binary, launched by srun or mpirun on every rank.
//   trident train DECK.toml [--set section.key=value]... [--metrics FILE.jsonl]
//                 [--trace FILE.json] [--resume PATH|latest]
//   trident estimate DECK.toml --world N [--set section.key=value]... [--memory 80GiB]
//   trident check DECK.toml --ranks N [--set section.key=value]... [--layouts FILE] [--json]
//   trident plan DECK.toml --gpus N [--cluster NAME|FILE.toml] [--set ...]... [--top K]
//                [--layout tp=8,pp=4,dp=16[,cp=2],v=2,mb=1,zero=1,sp=1,recompute=selective[,offload=cpu]] [--json]
//                [--stored-attention]
//   trident tokenize IN.txt OUT.bin [--ids] [--vocab N] [--format gpt-2|llama-3]
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

using namespace trident;

CLI::App* add_train(CLI::App& app, TrainOptions& train) {
  CLI::App* cmd = app.add_subcommand("train", "Train the model an input deck describes");
  cmd->add_option("deck", train.deck, "Input deck (TOML)")->required();
  cmd->add_option("--set", train.overrides,
                  "Override a deck key: section.key=value (repeatable)");
  cmd->add_option("--metrics", train.metrics, "Write per-step metrics as JSON Lines here");
  cmd->add_option("--trace", train.trace,
                  "Write a Chrome trace (Perfetto, chrome://tracing) of every rank here");
  cmd->add_option("--resume", train.resume,
                  "Continue from a checkpoint file, or 'latest' in checkpoint.dir");
  return cmd;
}

CLI::App* add_estimate(CLI::App& app, EstimateOptions& est) {
  CLI::App* cmd = app.add_subcommand(
      "estimate", "Memory per rank for each ZeRO stage, before running (one process)");
  cmd->add_option("deck", est.deck, "Input deck (TOML)")->required();
  cmd->add_option("--world", est.world, "Ranks of the planned job")->required();
  cmd->add_option("--set", est.overrides, "Override a deck key: section.key=value");
  cmd->add_option("--memory", est.memory, "Memory per rank, e.g. 80GiB: does the peak fit?");
  return cmd;
}

CLI::App* add_check(CLI::App& app, CheckOptions& check) {
  CLI::App* cmd = app.add_subcommand(
      "check", "Validate a deck for a job of N ranks exactly as train does (one process)");
  cmd->add_option("deck", check.deck, "Input deck (TOML)")->required();
  cmd->add_option("--ranks", check.ranks, "Ranks of the planned job");
  cmd->add_option("--set", check.overrides, "Override a deck key: section.key=value");
  cmd->add_option("--layouts", check.layouts,
                  "File (or -) with one layout per line: section.key=value words and "
                  "optionally ranks=N; prints one JSON verdict per line");
  cmd->add_flag("--json", check.json, "Print the verdict as one JSON object");
  return cmd;
}

CLI::App* add_plan(CLI::App& app, PlanOptions& plan) {
  CLI::App* cmd = app.add_subcommand(
      "plan", "Predict step time and memory per layout on a cluster and pick one (one process)");
  cmd->add_option("deck", plan.deck, "Input deck (TOML)")->required();
  cmd->add_option("--gpus", plan.gpus, "GPUs (ranks) of the planned job")->required();
  cmd->add_option("--cluster", plan.cluster,
                  "dgx-a100-80gb (default), dgx-a100-40gb, dgx-h100, dgx-h200, this-cpu, "
                  "or a cluster .toml file");
  cmd->add_option("--set", plan.overrides, "Override a deck key: section.key=value");
  cmd->add_option("--top", plan.top, "How many layouts to list (default 5)");
  cmd->add_option("--layout", plan.layout,
                  "Predict one layout: tp=8,pp=4,dp=16[,cp=2],v=2,mb=1,zero=1,sp=1,"
                  "recompute=selective[,offload=none|cpu|cpu:RATIO|nvme]");
  cmd->add_flag("--json", plan.json, "Print the plan as one JSON document");
  cmd->add_flag("--stored-attention", plan.stored_attention,
                "Model a framework that keeps the attention probabilities (Megatron-LM "
                "without flash attention) instead of Trident");
  return cmd;
}

CLI::App* add_tokenize(CLI::App& app, TokenizeOptions& tok) {
  CLI::App* cmd =
      app.add_subcommand("tokenize", "Turn a text file (or token ids) into a token shard");
  cmd->add_option("input", tok.input, "Text file, or - for standard input")->required();
  cmd->add_option("output", tok.output, "Token shard to write (.bin)")->required();
  cmd->add_flag("--ids", tok.ids,
                "The input is token ids (decimal, whitespace-separated) from another tokenizer");
  cmd->add_option("--vocab", tok.vocab,
                  "The model's vocabulary: ids must be below it; above 65536 the shard holds "
                  "uint32 tokens (default: 257, or the largest id + 1 with --ids)");
  cmd->add_option("--format", tok.format,
                  "gpt-2 (uint16 tokens) or llama-3 (uint32 tokens); default: the narrower "
                  "that holds --vocab")
      ->check(CLI::IsMember({"gpt-2", "llama-3"}));
  return cmd;
}

CLI::App* add_deck(CLI::App& app, bool& deck_reference) {
  CLI::App* cmd = app.add_subcommand("deck", "Describe the input deck's keys");
  cmd->add_flag("--reference", deck_reference,
                "Print every key with its type, default and meaning (Markdown)")
      ->required();
  return cmd;
}

CLI::App* add_inspect(CLI::App& app, InspectOptions& inspect) {
  CLI::App* cmd =
      app.add_subcommand("inspect", "Print a checkpoint's step, layout, deck and datasets");
  cmd->add_option("checkpoint", inspect.checkpoint, "Checkpoint file (.h5)")->required();
  return cmd;
}

// Every subcommand's options, as parsing fills them, and the subcommands.
struct Options {
  TrainOptions train;
  EstimateOptions est;
  CheckOptions check;
  PlanOptions plan;
  TokenizeOptions tok;
  bool deck_reference = false;
  InspectOptions inspect;
};
struct Subcommands {
  CLI::App *train, *est, *check, *plan, *tok, *deck, *inspect;
};

// In the order --help lists them.
Subcommands add_subcommands(CLI::App& app, Options& o) {
  Subcommands c{};
  c.train = add_train(app, o.train);
  c.est = add_estimate(app, o.est);
  c.check = add_check(app, o.check);
  c.plan = add_plan(app, o.plan);
  c.tok = add_tokenize(app, o.tok);
  c.deck = add_deck(app, o.deck_reference);
  c.inspect = add_inspect(app, o.inspect);
  return c;
}

// CLI11 reads an unknown first word as a missing subcommand: name it instead.
bool unknown_subcommand(CLI::App& app, int argc, char** argv, int rank) {
  if (argc <= 1 || argv[1][0] == '-') return false;
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
  if (std::find(names.begin(), names.end(), argv[1]) != names.end()) return false;
  const std::string near = closest_name(argv[1], names);
  if (rank == 0)
    std::fprintf(stderr, "error: unknown subcommand '%s'%s; subcommands: %s (see trident --help)\n",
                 argv[1], near.empty() ? "" : (" (did you mean '" + near + "'?)").c_str(),
                 fmt::format("{}", fmt::join(names, ", ")).c_str());
  return true;
}

// Training runs on every rank; the other subcommands on rank 0 alone.
int dispatch(const Subcommands& c, const Options& o, int rank) {
  if (*c.train) return train_command(o.train);
  if (*c.tok) return rank == 0 ? tokenize_command(o.tok) : kExitOk;
  if (*c.est) return rank == 0 ? estimate_command(o.est) : kExitOk;
  if (*c.plan) return rank == 0 ? plan_command(o.plan) : kExitOk;
  if (*c.check) return rank == 0 ? check_command(o.check) : kExitOk;
  if (*c.deck) {
    if (rank == 0) std::fputs(deck_reference_markdown().c_str(), stdout);
    return kExitOk;
  }
  if (*c.inspect) return rank == 0 ? inspect_command(o.inspect) : kExitOk;
  return kExitBadInput;
}

int run(int argc, char** argv, int rank) {
  CLI::App app{"Trident: data/tensor/pipeline-parallel GPT training for MPI clusters", "trident"};
  app.set_version_flag("--version", "trident 0.1.0");
  app.require_subcommand(1);
  Options o;
  const Subcommands c = add_subcommands(app, o);
  if (unknown_subcommand(app, argc, argv, rank)) return kExitBadInput;
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
  return dispatch(c, o, rank);
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
