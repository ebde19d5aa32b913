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

const std::vector<std::string> kLayoutFields = {"tp",  "pp", "dp",        "v",       "mb",
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
  return fmt::format("tp={},pp={},dp={},v={},mb={},zero={},sp={},recompute={}{}", p.shape.tp,
                     p.shape.pp, p.shape.dp, p.virtual_stages, p.micro_batch, p.zero_stage,
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
  // Model state depends on the grid, chunks, ZeRO stage, SP and offload, not
  // on the micro-batch or recompute: estimate it once per such key.
  std::map<std::tuple<int, int, int, int, bool, int, double>, MemoryEstimate> states;
  // A layout whose state does not fit the device tries the optimizer's state
  // on the host, the smallest share first (the fastest), then on NVMe where
  // the cluster says how fast its NVMe is.
  std::vector<std::pair<OffloadTarget, double>> offloads = {{OffloadTarget::none, 1.0}};
  if (cluster.host_gib > 0 && cluster.host_gbps > 0 && cluster.pcie_gbps > 0)
    for (double ratio : {0.25, 0.5, 0.75, 1.0}) offloads.emplace_back(OffloadTarget::cpu, ratio);
  if (cluster.nvme_gbps > 0 && (cluster.pcie_gbps > 0 || cluster.shared_node))
    offloads.emplace_back(OffloadTarget::nvme, 1.0);
  for (int tp = 1; tp <= std::min(r.gpus, cluster.gpus_per_node); tp *= 2)
    for (int pp = 1; pp <= std::min(r.gpus / tp, base.model.layers); ++pp) {
      if (r.gpus % (tp * pp) != 0) continue;
      const int dp = r.gpus / (tp * pp);
      for (int v : {1, 2, 4})
        for (int mb = 1; mb <= std::min(8, batch / dp); mb *= 2)
          for (int zero = 0; zero <= 3; ++zero)
            for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp)
              for (const auto& rc : kRecomputeNames) {
                if (v > 1 && pp == 1) continue;
                std::vector<std::string> layout = {
                    fmt::format("parallel.tp={}", tp), fmt::format("parallel.pp={}", pp),
                    fmt::format("parallel.dp={}", dp), fmt::format("parallel.virtual_stages={}", v),
                    fmt::format("train.micro_batch={}", mb), fmt::format("zero.stage={}", zero),
                    fmt::format("parallel.sequence_parallel={}", sp ? "true" : "false"),
                    fmt::format("train.recompute={}", rc.name)};
                if (v > 1) layout.push_back(schedule_override(ScheduleKind::interleaved));
                else if (interleaved_deck)
                  layout.push_back(schedule_override(ScheduleKind::one_f_one_b));
                for (const auto& [home, ratio] : offloads) {
                  if (home != OffloadTarget::none && zero == 0) break;  // offload needs ZeRO
                  std::vector<std::string> sets = layout;
                  for (auto& o : offload_overrides(home, ratio)) sets.push_back(std::move(o));
                  ++out.considered;
                  try {
                    auto [deck, shape] = resolve(r, sets);
                    const auto key = std::make_tuple(tp, pp, v, zero, sp == 1, int(home), ratio);
                    auto it = states.find(key);
                    if (it == states.end())
                      it = states.emplace(key, estimate_memory(deck, shape, zero)).first;
                    Prediction p =
                        predict_step(deck, shape, cluster, it->second, r.stored_attention);
                    const bool fits = p.fits();
                    (fits ? out.fitting : out.too_large).push_back(std::move(p));
                    if (fits) break;  // more offload would only be slower
                  } catch (const InputError&) {
                    ++out.invalid;
                    break;
                  }
                }
              }
    }
  // Within 0.5% the simpler layout wins: less ZeRO sharding, then less memory.
  auto faster = [](const Prediction& a, const Prediction& b) {
    if (std::abs(a.step_s - b.step_s) > 0.005 * std::min(a.step_s, b.step_s))
      return a.step_s < b.step_s;
    if (a.zero_stage != b.zero_stage) return a.zero_stage < b.zero_stage;
    return a.memory_bytes < b.memory_bytes;
  };
  std::sort(out.fitting.begin(), out.fitting.end(), faster);
  std::sort(out.too_large.begin(), out.too_large.end(), faster);
  return out;
}

}  // namespace trident
