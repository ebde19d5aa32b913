// One deck key as the deck reader reads it: section, name, type, the value
// it has when the deck does not set it and, for a choice, the names it takes.
// The deck reference is made of these.
#pragma once
#include <string>
#include <vector>

namespace trident {

struct DeckKey {
  std::string section, key, type, default_value;
  std::vector<std::string> choices;  // empty unless the key names one of a fixed set
};

}  // namespace trident
