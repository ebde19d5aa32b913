#include "plan/planner.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <tuple>

#include "core/error.hpp"
#include "io/deck.hpp"
#include "io/deck_reader.hpp"

namespace trident {
namespace {

const std::vector<std::string> kLayoutFields = {"tp", "pp",   "dp", "cp",        "v",      "mb",
                                                "zero", "sp", "recompute", "offload", "schedule"};

int positive_int(const std::string& field, const std::string& value, int lowest) {
  std::size_t used = 0;
  int n = -1;
  try {
    n = std::stoi(value, &used);
  } catch (const std::exception&) {
  }
  if (used != value.size() || n < lowest)
    throw InputError(fmt::format("--layout: {}={} is not valid; {} must be an integer >= {}",
                                 field, value, field, lowest));
  return n;
}

std::string schedule_override(ScheduleKind k) {
  return std::string("parallel.schedule=") + choice_name(k);
}

// The validator's verdict on one candidate: the resolved deck and grid.
std::pair<Deck, GridShape> resolve(const PlanRequest& r, const std::vector<std::string>& layout) {
  std::vector<std::string> all = r.overrides;
  all.insert(all.end(), layout.begin(), layout.end());
  Deck deck = parse_deck(r.deck_text, r.deck_path, all);
  const GridShape shape = resolve_layout(deck, r.gpus);
  return {deck, shape};
}

// "none", "cpu", "cpu:R" (offload.ratio R) or "nvme".
std::pair<OffloadTarget, double> parse_offload(const std::string& value) {
  const auto colon = value.find(':');
  const auto home = parse_choice<OffloadTarget>(value.substr(0, colon));
  double ratio = 1;
  bool ratio_ok = colon == std::string::npos;
  if (!ratio_ok && home == OffloadTarget::cpu) {
    std::size_t used = 0;
    try {
      ratio = std::stod(value.substr(colon + 1), &used);
    } catch (const std::exception&) {
    }
    ratio_ok = used > 0 && used == value.size() - colon - 1 && ratio > 0 && ratio <= 1;
  }
  if (!home || !ratio_ok)
    throw InputError(fmt::format("--layout: offload={} is not valid; offload must be none, cpu, "
                                 "cpu:RATIO (the host's share of the optimizer state, in (0, 1]) "
                                 "or nvme", value));
  return {*home, ratio};
}

// The deck keys of an optimizer offload setting. The plan never opens the
// swap file, so a stand-in nvme_path satisfies the validator.
std::vector<std::string> offload_overrides(OffloadTarget home, double ratio) {
  std::vector<std::string> out = {std::string("offload.optimizer=") + choice_name(home)};
  if (home == OffloadTarget::cpu) out.push_back(fmt::format("offload.ratio={}", ratio));
  if (home == OffloadTarget::nvme) out.push_back("offload.nvme_path=\"/tmp\"");
  return out;
}

// A grid of model-parallel axes; dp fills the rest of the GPUs.
struct ModelGrid {
  int tp = 1, pp = 1, cp = 1;
};

// Context groups that leave a rank fewer rows of a sequence than this are not
// tried: at such lengths activations rarely need the split, and the cost
// model prices neither the ring's per-block merges nor its smaller kernels
// (Megatron-Core applies context parallelism from about 8K tokens).
constexpr int kMinContextRows = 2048;

// The grids plan_all tries on `gpus`: tp a power of two within a node, pp up
// to the layers, cp a power of two that cuts seq_len into 2·cp chunks (as
// `trident check` requires). The grids without a context group come first,
// in the order they had before cp was planned.
std::vector<ModelGrid> model_grids(int gpus, const Cluster& cluster, const GptConfig& m) {
  std::vector<ModelGrid> out;
  for (int tp = 1; tp <= std::min(gpus, cluster.gpus_per_node); tp *= 2)
    for (int pp = 1; pp <= std::min(gpus / tp, m.layers); ++pp)
      if (gpus % (tp * pp) == 0) out.push_back({tp, pp, 1});
  const std::size_t without_context = out.size();
  for (std::size_t i = 0; i < without_context; ++i) {
    const ModelGrid g = out[i];
    for (int cp = 2; gpus % (g.tp * g.pp * cp) == 0 && m.seq_len % (2 * cp) == 0 &&
                     m.seq_len / cp >= kMinContextRows;
         cp *= 2)
      out.push_back({g.tp, g.pp, cp});
  }
  return out;
}

// Model state depends on the grid, chunks, ZeRO stage, SP and offload, not
// on the micro-batch or recompute (save the ring's buffers, which grow with
// the micro-batch: at cp > 1 the key holds it): tp, pp, cp, v, zero, sp, mb.
using StateKey = std::tuple<int, int, int, int, int, bool, int>;

// Each candidate layout tried with the optimizer's state at each home in turn,
// model state estimated once per key and home.
class LayoutTrials {
 public:
  LayoutTrials(const PlanRequest& r, const Cluster& cluster, PlanResult& out)
      : r_(r), cluster_(cluster), out_(out) {
    // A layout whose state does not fit the device tries the optimizer's
    // state on the host, the smallest share first (the fastest), then on
    // NVMe where the cluster says how fast its NVMe is.
    if (cluster.host_gib > 0 && cluster.host_gbps > 0 && cluster.pcie_gbps > 0)
      for (double ratio : {0.25, 0.5, 0.75, 1.0}) offloads_.emplace_back(OffloadTarget::cpu, ratio);
    if (cluster.nvme_gbps > 0 && (cluster.pcie_gbps > 0 || cluster.shared_node))
      offloads_.emplace_back(OffloadTarget::nvme, 1.0);
  }

  void run(const std::vector<std::string>& layout, const StateKey& key) {
    const int zero = std::get<4>(key);  // the key's ZeRO stage
    for (const auto& [home, ratio] : offloads_) {
      if (home != OffloadTarget::none && zero == 0) break;  // offload needs ZeRO
      std::vector<std::string> sets = layout;
      for (auto& o : offload_overrides(home, ratio)) sets.push_back(std::move(o));
      ++out_.considered;
      try {
        auto [deck, shape] = resolve(r_, sets);
        auto it = states_.find(std::make_tuple(key, int(home), ratio));
        if (it == states_.end())
          it = states_.emplace(std::make_tuple(key, int(home), ratio),
                               estimate_memory(deck, shape, zero)).first;
        Prediction p = predict_step(deck, shape, cluster_, it->second, r_.stored_attention);
        const bool fits = p.fits();
        (fits ? out_.fitting : out_.too_large).push_back(std::move(p));
        if (fits) break;  // more offload would only be slower
      } catch (const InputError&) {
        ++out_.invalid;
        break;
      }
    }
  }

 private:
  const PlanRequest& r_;
  const Cluster& cluster_;
  PlanResult& out_;
  std::vector<std::pair<OffloadTarget, double>> offloads_ = {{OffloadTarget::none, 1.0}};
  std::map<std::tuple<StateKey, int, double>, MemoryEstimate> states_;
};

}  // namespace

std::vector<std::string> layout_overrides(const std::string& layout) {
  std::vector<std::string> out;
  std::map<std::string, std::string> seen;
  std::stringstream words(layout);
  std::string item;
  while (std::getline(words, item, ',')) {
    const auto eq = item.find('=');
    const std::string key = item.substr(0, eq);
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      throw InputError(fmt::format("--layout: '{}' is not field=value; write e.g. "
                                   "tp=8,pp=4,dp=16,v=2,mb=1,zero=1,sp=1,recompute=selective",
                                   item));
    const std::string value = item.substr(eq + 1);
    if (std::find(kLayoutFields.begin(), kLayoutFields.end(), key) == kLayoutFields.end()) {
      const std::string near = closest_name(key, kLayoutFields);
      throw InputError(fmt::format("--layout: unknown field '{}'{}; fields: {}", key,
                                   near.empty() ? "" : fmt::format(" (did you mean '{}'?)", near),
                                   fmt::join(kLayoutFields, ", ")));
    }
    if (!seen.emplace(key, value).second)
      throw InputError(fmt::format("--layout: field '{}' is given twice", key));
  }
  for (const char* key : {"tp", "pp"})
    if (!seen.count(key))
      throw InputError(fmt::format("--layout: field '{}' is missing (tp and pp are required)", key));
  for (const auto& [key, value] : seen) {
    if (key == "tp") out.push_back("parallel.tp=" + std::to_string(positive_int(key, value, 1)));
    if (key == "pp") out.push_back("parallel.pp=" + std::to_string(positive_int(key, value, 1)));
    if (key == "dp") out.push_back("parallel.dp=" + std::to_string(positive_int(key, value, 1)));
    if (key == "cp") out.push_back("parallel.cp=" + std::to_string(positive_int(key, value, 1)));
    if (key == "mb") out.push_back("train.micro_batch=" + std::to_string(positive_int(key, value, 1)));
    if (key == "zero") {
      const int z = positive_int(key, value, 0);
      if (z > 3) throw InputError(fmt::format("--layout: zero={} is not valid; zero must be 0, 1, 2 or 3", value));
      out.push_back("zero.stage=" + std::to_string(z));
    }
    if (key == "sp") {
      if (value != "0" && value != "1")
        throw InputError(fmt::format("--layout: sp={} is not valid; sp must be 0 or 1", value));
      out.push_back(std::string("parallel.sequence_parallel=") + (value == "1" ? "true" : "false"));
    }
    if (key == "recompute") {
      if (!parse_choice<Recompute>(value))
        throw InputError(fmt::format("--layout: recompute={} is not valid; recompute must be {}",
                                     value, choice_list<Recompute>("")));
      out.push_back("train.recompute=" + value);
    }
    if (key == "offload") {
      const auto [home, ratio] = parse_offload(value);
      for (auto& o : offload_overrides(home, ratio)) out.push_back(std::move(o));
    }
    if (key == "schedule") out.push_back("parallel.schedule=" + value);
  }
  if (seen.count("v")) {
    const int v = positive_int("v", seen["v"], 1);
    out.push_back("parallel.virtual_stages=" + std::to_string(v));
    if (v > 1 && !seen.count("schedule"))
      out.push_back(schedule_override(ScheduleKind::interleaved));
  }
  return out;
}

std::string layout_string(const Prediction& p) {
  std::string offload;
  if (p.offload != OffloadTarget::none) offload = fmt::format(",offload={}", choice_name(p.offload));
  if (p.offload == OffloadTarget::cpu && p.offload_ratio < 1)
    offload += fmt::format(":{}", p.offload_ratio);
  const std::string cp = p.shape.cp > 1 ? fmt::format(",cp={}", p.shape.cp) : "";
  return fmt::format("tp={},pp={},dp={}{},v={},mb={},zero={},sp={},recompute={}{}", p.shape.tp,
                     p.shape.pp, p.shape.dp, cp, p.virtual_stages, p.micro_batch, p.zero_stage,
                     p.sequence_parallel ? 1 : 0, choice_name(p.recompute), offload);
}

Prediction plan_layout(const PlanRequest& r, const std::vector<std::string>& layout,
                       const Cluster& cluster) {
  auto [deck, shape] = resolve(r, layout);
  const MemoryEstimate state = estimate_memory(deck, shape, deck.zero.stage);
  return predict_step(deck, shape, cluster, state, r.stored_attention);
}

PlanResult plan_all(const PlanRequest& r, const Cluster& cluster) {
  PlanResult out;
  const Deck base = parse_deck(r.deck_text, r.deck_path, r.overrides);
  const int batch = base.train.batch;
  const bool interleaved_deck = base.parallel.schedule == ScheduleKind::interleaved;
  LayoutTrials trials(r, cluster, out);
  for (const ModelGrid& g : model_grids(r.gpus, cluster, base.model)) {
    const int dp = r.gpus / (g.tp * g.pp * g.cp);
    for (int v : {1, 2, 4})
      for (int mb = 1; mb <= std::min(8, batch / dp); mb *= 2)
        for (int zero = 0; zero <= 3; ++zero)
          for (int sp = 0; sp <= (g.tp > 1 ? 1 : 0); ++sp)
            for (const auto& rc : kRecomputeNames) {
              if (v > 1 && g.pp == 1) continue;
              std::vector<std::string> layout = {
                  fmt::format("parallel.tp={}", g.tp), fmt::format("parallel.pp={}", g.pp),
                  fmt::format("parallel.dp={}", dp), fmt::format("parallel.cp={}", g.cp),
                  fmt::format("parallel.virtual_stages={}", v),
                  fmt::format("train.micro_batch={}", mb), fmt::format("zero.stage={}", zero),
                  fmt::format("parallel.sequence_parallel={}", sp ? "true" : "false"),
                  fmt::format("train.recompute={}", rc.name)};
              if (v > 1) layout.push_back(schedule_override(ScheduleKind::interleaved));
              else if (interleaved_deck)
                layout.push_back(schedule_override(ScheduleKind::one_f_one_b));
              const StateKey key{g.tp, g.pp, g.cp, v, zero, sp == 1, g.cp > 1 ? mb : 0};
              trials.run(layout, key);
            }
  }
  order_fastest_first(out.fitting);
  order_fastest_first(out.too_large);
  return out;
}

}  // namespace trident
