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
    if (key == "offload" && value != "none")
      throw InputError(fmt::format("--layout: offload={} is not valid; Trident keeps every "
                                   "state on the device: offload must be none", value));
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
  return fmt::format("tp={},pp={},dp={},v={},mb={},zero={},sp={},recompute={}", p.shape.tp,
                     p.shape.pp, p.shape.dp, p.virtual_stages, p.micro_batch, p.zero_stage,
                     p.sequence_parallel ? 1 : 0, choice_name(p.recompute));
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
  // Model state depends on the grid, chunks, ZeRO stage and SP, not on the
  // micro-batch or recompute: estimate it once per such key.
  std::map<std::tuple<int, int, int, int, bool>, MemoryEstimate> states;
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
                ++out.considered;
                try {
                  auto [deck, shape] = resolve(r, layout);
                  const auto key = std::make_tuple(tp, pp, v, zero, sp == 1);
                  auto it = states.find(key);
                  if (it == states.end())
                    it = states.emplace(key, estimate_memory(deck, shape, zero)).first;
                  Prediction p = predict_step(deck, shape, cluster, it->second, r.stored_attention);
                  (p.fits() ? out.fitting : out.too_large).push_back(std::move(p));
                } catch (const InputError&) {
                  ++out.invalid;
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
