// trident estimate: memory per rank for a deck, a world size and each ZeRO
// stage, before submitting anything.
#include <fmt/format.h>

#include <cctype>
#include <cstdio>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "io/deck.hpp"
#include "plan/estimate.hpp"

namespace trident {
namespace {

// "80GiB", "16 GB", "512MiB", "1e9": bytes.
double parse_size(const std::string& text) {
  std::size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  std::string unit = text.substr(pos);
  unit.erase(0, unit.find_first_not_of(' '));
  for (auto& c : unit) c = char(std::tolower(static_cast<unsigned char>(c)));
  const double k = unit.empty() || unit == "b" ? 1
                   : unit == "kib" ? 1024.0 : unit == "kb" ? 1e3
                   : unit == "mib" ? 1024.0 * 1024 : unit == "mb" ? 1e6
                   : unit == "gib" ? 1024.0 * 1024 * 1024 : unit == "gb" ? 1e9
                   : unit == "tib" ? 1024.0 * 1024 * 1024 * 1024 : unit == "tb" ? 1e12 : -1;
  if (pos == 0 || k < 0 || v <= 0)
    throw InputError(fmt::format("--memory {}: not a size; write e.g. 80GiB, 16GB or 512MiB", text));
  return v * k;
}

// Bytes per rank under each ZeRO stage beside the ZeRO paper's model state
// (its precision the deck's: mixed 2+2+12 B with 16-bit weights, else
// 4+4+8 B, Psi per tensor rank); with --memory, whether the peak fits.
void print_stage_table(const Deck& deck, const GridShape& shape, double psi, double limit) {
  const bool mixed = deck.precision.dtype != Precision::fp32;
  fmt::print("{:<8}{:>12}{:>12}{:>12}{:>14}{:>12}{:>8}{:>14}{:>12}{:>12}{}\n", "zero", "params",
             "grads", "optimizer", "model state", "paper", "ratio", "activations", "buffers",
             "peak", limit > 0 ? fmt::format("  fits {}", format_bytes(limit)) : "");
  // --memory bounds the arenas, and on CUDA the backend's operand copies.
  for (int zero_stage = 0; zero_stage <= 3; ++zero_stage) {
    const MemoryEstimate e = estimate_memory(deck, shape, zero_stage);
    auto b = [&](MemCategory c) { return format_bytes(e.bytes[int(c)]); };
    const std::string mark = zero_stage == deck.zero.stage ? " (deck)" : "";
    const double paper = zero_paper_bytes(psi, shape.dp, zero_stage, mixed);
    fmt::print("{:<8}{:>12}{:>12}{:>12}{:>14}{:>12}{:>8}{:>14}{:>12}{:>12}{}\n",
               fmt::format("{}{}", zero_stage, mark), b(MemCategory::parameters),
               b(MemCategory::gradients), b(MemCategory::optimizer),
               format_bytes(e.model_state()), format_bytes(paper),
               fmt::format("{:.2f}", e.model_state() / paper), b(MemCategory::activations),
               b(MemCategory::buffers), format_bytes(e.peak()),
               limit > 0 ? fmt::format("  {}", e.device_peak() <= limit ? "yes" : "NO") : "");
  }
}

// The deck's stage beyond the arenas: on the CPU backend the arenas are the
// process's memory, the rest the runtime (measured: src/plan/estimate.hpp);
// on CUDA the operand copies; offload's swap files and host memory.
void print_beyond_arenas(const Deck& deck, const MemoryEstimate& at_deck) {
  std::string host =
      at_deck.host > 0 ? fmt::format(" + offloaded to host memory {}", format_bytes(at_deck.host))
                       : "";
  if (at_deck.checkpoint_staging > 0)
    host += fmt::format(" + async checkpoint staging {}", format_bytes(at_deck.checkpoint_staging));
  fmt::print("\nprocess RSS (CPU backend, stage {}): arenas {}{} + runtime {} = {} (runtime: "
             "binary, MPI, oneDNN, HDF5 {} measured; MPI reduce-scatter temporaries {})\n",
             deck.zero.stage, format_bytes(at_deck.peak()), host, format_bytes(at_deck.runtime),
             format_bytes(at_deck.process_rss()), format_bytes(kRuntimeBaseBytes),
             format_bytes(at_deck.runtime - kRuntimeBaseBytes));
  if (at_deck.device_copies > 0)
    fmt::print("device memory (CUDA backend, the rank with the head): arenas {} + bf16 "
               "operand copies {} = {} (a run prints the copies as kernel scratch; the CUDA "
               "context, cuBLAS and NCCL need a few GiB more)\n",
               format_bytes(at_deck.peak()), format_bytes(at_deck.device_copies),
               format_bytes(at_deck.device_peak()));
  if (at_deck.checkpoint_staging > 0)
    fmt::print("async checkpoint staging per rank in host memory: up to {} while a save "
               "drains (checkpoint.staging_mb for device and offloaded state, and as much "
               "copied at an optimizer step)\n", format_bytes(at_deck.checkpoint_staging));
  if (at_deck.undo_copy > 0)
    fmt::print("post-validation undo copy per rank: {} (in the optimizer's bytes: the weights, "
               "Adam moments and masters once more)\n", format_bytes(at_deck.undo_copy));
  if (at_deck.swap > 0)
    fmt::print("swap files per rank in offload.nvme_path: {} (offload = \"nvme\")\n",
               format_bytes(at_deck.swap));
  if (at_deck.host > 0 && deck.system.device != Device::cpu)
    fmt::print("host memory per rank beside the device's: {} (offload: optimizer state, the "
               "gradients' copy, parameter shards; pinned with offload.pin_memory)\n",
               format_bytes(at_deck.host));
}

// The same layout under each train.recompute mode (precision as in the
// deck), and the paper's model state in both precisions.
void print_alternatives(const Deck& deck, const GridShape& shape, double psi) {
  std::string modes;
  for (const auto& mode : kRecomputeNames) {
    Deck d = deck;
    d.train.recompute = mode.value;
    modes += fmt::format("{}{} {}", modes.empty() ? "" : ", ", mode.name,
                         format_bytes(estimate_memory(d, shape, deck.zero.stage)
                                          .bytes[int(MemCategory::activations)]));
  }
  fmt::print("\nactivations (recompute = {}, {}): {}\n", choice_name(deck.train.recompute),
             choice_name(deck.precision.dtype), modes);
  fmt::print("ZeRO paper's model state per rank (Psi = {:.2f} M per tensor rank, N_d = {}):\n",
             psi / 1e6, shape.dp);
  for (bool paper_mixed : {true, false}) {
    fmt::print("  {:<28}", paper_mixed ? "mixed precision (2+2+12 B):" : "fp32 (4+4+8 B):");
    for (int zero_stage = 0; zero_stage <= 3; ++zero_stage)
      fmt::print("  stage {} {:>10}", zero_stage,
                 format_bytes(zero_paper_bytes(psi, shape.dp, zero_stage, paper_mixed)));
    fmt::print("\n");
  }
}

}  // namespace

int estimate_command(const EstimateOptions& o) {
  try {
    Deck deck = load_deck(o.deck, o.overrides);
    if (o.world < 1) throw InputError("--world must be at least 1");
    const GridShape shape = resolve_layout(deck, o.world);
    const double limit = o.memory.empty() ? 0 : parse_size(o.memory);
    const auto& m = deck.model;
    fmt::print("trident estimate | deck {} | {} ranks | layout TP({})-PP({})-DP({}) | micro_batch "
               "{} x seq_len {}\n", deck.path, o.world, shape.tp, shape.pp, shape.dp,
               deck.train.micro_batch, m.seq_len);
    const MemoryEstimate base = estimate_memory(deck, shape, 0);
    const auto& pr = deck.precision;
    fmt::print("model: {:.2f} M parameters (global); bytes per rank below are Trident's arenas "
               "(weights {}, gradients {}{}), padding included\n"
               "model state = params + grads + optimizer, this rank's shards; buffers = working "
               "buffers (ZeRO gather and reduce slots, f32 working copies of 16-bit units, "
               "receive and chunk buffers)\n\n", base.parameters / 1e6, choice_name(pr.dtype),
               choice_name(pr.reduce_dtype), pr.dtype == Precision::fp32 ? "" : ", f32 masters");
    const double psi = base.parameters / shape.tp;
    print_stage_table(deck, shape, psi, limit);
    print_beyond_arenas(deck, estimate_memory(deck, shape, deck.zero.stage));
    print_alternatives(deck, shape, psi);
    if (limit > 0) {
      const double peak = estimate_memory(deck, shape, deck.zero.stage).device_peak();
      fmt::print("deck's stage {}: predicted peak {} {} the {} given\n", deck.zero.stage,
                 format_bytes(peak), peak <= limit ? "fits in" : "does NOT fit in",
                 format_bytes(limit));
    }
  } catch (const InputError& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return kExitBadInput;
  }
  return kExitOk;
}

}  // namespace trident
