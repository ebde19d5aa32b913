// Subcommands of the trident binary. Each returns the process exit code.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trident {

struct TrainOptions {
  std::string deck;
  std::vector<std::string> overrides;  // --set section.key=value
  std::string metrics;                 // --metrics FILE.jsonl (overrides output.metrics)
  std::string trace;                   // --trace FILE.json: Chrome trace of every rank
  std::string resume;                  // --resume PATH|latest; empty: start from scratch
};
int train_command(const TrainOptions& options);

struct EstimateOptions {
  std::string deck;
  std::vector<std::string> overrides;
  int world = 1;        // ranks of the planned job
  std::string memory;   // e.g. "80GiB": say whether the peak fits
};
int estimate_command(const EstimateOptions& options);

struct CheckOptions {
  std::string deck;
  std::vector<std::string> overrides;
  int ranks = 1;        // world size of the job to validate for
  std::string layouts;  // file (or -) of layouts, one per line; empty: check just this one
  bool json = false;    // print the verdict as one JSON line
};
int check_command(const CheckOptions& options);

struct PlanOptions {
  std::string deck;
  std::vector<std::string> overrides;
  int gpus = 1;
  std::string cluster = "dgx-a100-80gb";  // built-in name or a .toml file
  std::string layout;  // tp=8,pp=4,...: predict this one; empty: rank every valid layout
  int top = 5;
  bool json = false;
  bool stored_attention = false;  // model a framework that keeps the T x T probabilities
};
int plan_command(const PlanOptions& options);

struct TokenizeOptions {
  std::string input;   // text file, or - for standard input
  std::string output;  // .bin shard
  bool ids = false;     // the input is decimal token ids, not text
  std::int64_t vocab = 0;  // the model's vocabulary; 0: what the tokens need
  std::string format;   // "gpt-2" or "llama-3"; empty: the narrower that holds vocab
};
int tokenize_command(const TokenizeOptions& options);

struct InspectOptions {
  std::string checkpoint;  // .h5 file
};
int inspect_command(const InspectOptions& options);

}  // namespace trident
