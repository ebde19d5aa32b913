// trident plan: which layout to run a deck on N GPUs with, before sbatch.
// Predicts step time and memory for one layout, or ranks every valid one.
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "memory/ledger.hpp"
#include "plan/planner.hpp"

namespace trident {
namespace {

nlohmann::json to_json(const Prediction& p) {
  nlohmann::json costs = nlohmann::json::object();
  for (const auto& [name, seconds] : p.costs) costs[name] = seconds;
  return {{"layout", layout_string(p)},
          {"tp", p.shape.tp},
          {"pp", p.shape.pp},
          {"dp", p.shape.dp},
          {"cp", p.shape.cp},
          {"virtual_stages", p.virtual_stages},
          {"micro_batch", p.micro_batch},
          {"micro_batches", p.micro_batches},
          {"zero", p.zero_stage},
          {"sequence_parallel", p.sequence_parallel},
          {"recompute", choice_name(p.recompute)},
          {"schedule", choice_name(p.schedule)},
          {"offload", choice_name(p.offload)},
          {"offload_ratio", p.offload_ratio},
          {"step_s", p.step_s},
          {"tokens_per_s_per_gpu", p.tokens_per_s_per_gpu},
          {"model_tflops_per_gpu", p.model_tflops},
          {"hardware_tflops_per_gpu", p.hardware_tflops},
          {"mfu", p.mfu},
          {"memory_bytes", p.memory_bytes},
          {"model_state_bytes", p.model_state_bytes},
          {"activation_bytes", p.activation_bytes},
          {"capacity_bytes", p.capacity_bytes},
          {"host_bytes", p.host_bytes},
          {"host_capacity_bytes", p.host_capacity_bytes},
          {"fits", p.fits()},
          {"largest_cost", p.largest_cost()},
          {"costs_s", costs},
          {"reason", p.reason()}};
}

void print_header() {
  fmt::print("{:<72}{:>9}{:>10}{:>8}{:>8}{:>6}{:>24}  {}\n", "layout", "step s", "tok/s/gpu",
             "TF mdl", "TF hw", "MFU", "memory / capacity", "bounded by");
}

void print_row(const Prediction& p) {
  fmt::print("{:<72}{:>9.3f}{:>10.0f}{:>8.1f}{:>8.1f}{:>5.0f}%{:>24}  {}\n", layout_string(p),
             p.step_s, p.tokens_per_s_per_gpu, p.model_tflops, p.hardware_tflops, 100 * p.mfu,
             format_bytes(p.memory_bytes) + " / " + format_bytes(p.capacity_bytes), p.reason());
}

}  // namespace

int plan_command(const PlanOptions& o) {
  try {
    if (o.gpus < 1) throw InputError("--gpus must be at least 1");
    if (o.top < 1) throw InputError("--top must be at least 1");
    std::ifstream in(o.deck);
    if (!in) throw InputError(fmt::format("{}: cannot open the deck (does the file exist?)", o.deck));
    std::stringstream text;
    text << in.rdbuf();
    const PlanRequest request{o.deck, text.str(), o.overrides, o.gpus, o.stored_attention};
    const std::vector<std::string> layout =
        o.layout.empty() ? std::vector<std::string>{} : layout_overrides(o.layout);
    const Cluster cluster = find_cluster(o.cluster);
    const std::string title = fmt::format("trident plan | deck {} | {} GPUs | cluster {} ({} per "
                                          "node, {:.3g} TFLOP/s 16-bit, {:.3g} fp32, {:.0f} GiB)",
                                          o.deck, o.gpus, cluster.name, cluster.gpus_per_node,
                                          cluster.peak_tflops_16, cluster.peak_tflops_32,
                                          cluster.hbm_gib);
    if (!o.layout.empty()) {
      const Prediction p = plan_layout(request, layout, cluster);
      if (o.json) {
        fmt::print("{}\n", nlohmann::json{{"deck", o.deck}, {"gpus", o.gpus},
                                          {"cluster", cluster.name}, {"prediction", to_json(p)}}
                               .dump());
        return kExitOk;
      }
      fmt::print("{}\n", title);
      print_header();
      print_row(p);
      fmt::print("\nstep parts (s):");
      for (const auto& [name, seconds] : p.costs) fmt::print(" {} {:.3f}", name, seconds);
      fmt::print("\nmemory per GPU: model state {} + activations {} + overhead {} = {} of {}: {}\n",
                 format_bytes(p.model_state_bytes), format_bytes(p.activation_bytes),
                 format_bytes(p.overhead_bytes), format_bytes(p.memory_bytes),
                 format_bytes(p.capacity_bytes),
                 p.fits_device() ? "fits" : "does NOT fit (OOM)");
      if (p.offload == OffloadTarget::cpu)
        fmt::print("host memory per GPU: offloaded state {} of {}: {}\n", format_bytes(p.host_bytes),
                   format_bytes(p.host_capacity_bytes),
                   p.host_bytes <= p.host_capacity_bytes ? "fits" : "does NOT fit");
      return kExitOk;
    }
    const PlanResult r = plan_all(request, cluster);
    const int shown_rejected = 3;
    if (o.json) {
      nlohmann::json best = nlohmann::json::array(), rejected = nlohmann::json::array();
      for (std::size_t i = 0; i < r.fitting.size() && int(i) < o.top; ++i)
        best.push_back(to_json(r.fitting[i]));
      for (std::size_t i = 0; i < r.too_large.size() && int(i) < shown_rejected; ++i)
        rejected.push_back(to_json(r.too_large[i]));
      fmt::print("{}\n", nlohmann::json{{"deck", o.deck},
                                        {"gpus", o.gpus},
                                        {"cluster", cluster.name},
                                        {"considered", r.considered},
                                        {"invalid", r.invalid},
                                        {"fitting", r.fitting.size()},
                                        {"best", best},
                                        {"rejected_for_memory", rejected}}
                             .dump());
      return r.fitting.empty() ? kExitBadInput : kExitOk;
    }
    fmt::print("{}\n{} layouts considered: {} refused by the deck validator, {} fit, {} do not\n\n",
               title, r.considered, r.invalid, r.fitting.size(), r.too_large.size());
    if (r.fitting.empty()) {
      fmt::print(stderr, "error: no valid layout of {} fits in {}; add GPUs or shrink the model\n",
                 o.deck, format_bytes(cluster.hbm_gib * 1024.0 * 1024 * 1024));
    } else {
      print_header();
      for (std::size_t i = 0; i < r.fitting.size() && int(i) < o.top; ++i) print_row(r.fitting[i]);
    }
    if (!r.too_large.empty()) {
      fmt::print("\nfaster layouts rejected for memory:\n");
      for (std::size_t i = 0; i < r.too_large.size() && int(i) < shown_rejected; ++i)
        if (r.fitting.empty() || r.too_large[i].step_s < r.fitting.front().step_s)
          print_row(r.too_large[i]);
    }
    return r.fitting.empty() ? kExitBadInput : kExitOk;
  } catch (const InputError& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return kExitBadInput;
  }
}

}  // namespace trident
