// The input deck (TOML): what to train and how. Every key is typed, checked and
// documented in docs/decks.md (trident deck --reference); unknown keys are
// errors with a suggestion.
#pragma once
#include <string>
#include <vector>

#include "grid/grid_shape.hpp"
#include "io/deck_key.hpp"
#include "io/deck_sections.hpp"

namespace trident {

struct Deck {
  std::string path;
  std::string text;  // the deck as read (with overrides listed), for provenance
  GptConfig model;
  DataSection data;
  TrainSection train;
  ParallelSection parallel;
  ZeroSection zero;
  OffloadSection offload;
  PrecisionSection precision;
  OutputSection output;
  CheckpointSection checkpoint;
  SystemSection system;
};

// Reads and checks a deck; `overrides` are "section.key=value" strings.
// Throws InputError naming the file, the key and the fix.
Deck load_deck(const std::string& path, const std::vector<std::string>& overrides);
// Every key the deck reader knows, in reading order, with its type and default.
std::vector<DeckKey> deck_keys();
Deck parse_deck(const std::string& text, const std::string& origin,
                const std::vector<std::string>& overrides);

// Checks the deck against the job size and returns the process grid shape
// (dp derived when left out). Throws InputError.
GridShape resolve_layout(Deck& deck, int world_size);

}  // namespace trident
