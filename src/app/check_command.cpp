// trident check: would `trident train` accept this deck on N ranks? Runs the
// same validation (load_deck + resolve_layout) in one process, so test drivers
// and users can ask about many layouts without launching any of them.
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "io/deck.hpp"

namespace trident {
namespace {

// The verdict on one layout as a JSON object: valid and the resolved grid, or
// the validator's message (the one `trident train` would print).
nlohmann::json verdict(const std::string& deck_path, const std::vector<std::string>& overrides,
                       int ranks) {
  try {
    if (ranks < 1) throw InputError("--ranks must be at least 1");
    Deck deck = load_deck(deck_path, overrides);
    const GridShape s = resolve_layout(deck, ranks);
    return {{"valid", true},  {"ranks", ranks},
            {"dp", s.dp},     {"tp", s.tp},
            {"pp", s.pp},     {"cp", s.cp},
            {"micro_batch", deck.train.micro_batch},
            {"micro_batches", deck.train.batch / (s.dp * deck.train.micro_batch)}};
  } catch (const InputError& e) {
    return {{"valid", false}, {"ranks", ranks}, {"error", e.what()}};
  }
}

// One layout per line: whitespace-separated section.key=value overrides (added
// to the command line's), and optionally ranks=N. Blank lines and # comments
// are echoed as nulls so verdict i answers line i.
int check_layouts(const CheckOptions& o) {
  std::ifstream in(o.layouts == "-" ? "/dev/stdin" : o.layouts);
  if (!in) {
    fmt::print(stderr, "error: --layouts {}: cannot open the file\n", o.layouts);
    return kExitBadInput;
  }
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::vector<std::string> overrides = o.overrides;
    int ranks = o.ranks;
    std::string w;
    bool empty = true;
    while (words >> w) {
      if (w[0] == '#') break;
      empty = false;
      if (w.rfind("ranks=", 0) == 0) {
        try {
          ranks = std::stoi(w.substr(6));
        } catch (const std::exception&) {
          ranks = 0;  // reported as an invalid rank count
        }
      } else {
        overrides.push_back(w);
      }
    }
    if (empty) {
      fmt::print("null\n");
      continue;
    }
    const nlohmann::json v = verdict(o.deck, overrides, ranks);
    fmt::print("{}\n", v.dump());
  }
  std::fflush(stdout);
  return kExitOk;  // a refused layout is an answer, not an error of this command
}

}  // namespace

int check_command(const CheckOptions& o) {
  if (!o.layouts.empty()) return check_layouts(o);
  const nlohmann::json v = verdict(o.deck, o.overrides, o.ranks);
  if (o.json) fmt::print("{}\n", v.dump());
  if (!v["valid"].get<bool>()) {
    if (!o.json) fmt::print(stderr, "error: {}\n", v["error"].get<std::string>());
    return kExitBadInput;
  }
  if (!o.json)
    fmt::print("ok: {} ranks, layout dp {} x tp {} x pp {}, micro_batch {} ({} per step)\n",
               o.ranks, v["dp"].get<int>(), v["tp"].get<int>(), v["pp"].get<int>(),
               v["micro_batch"].get<int>(), v["micro_batches"].get<int>());
  return kExitOk;
}

}  // namespace trident
