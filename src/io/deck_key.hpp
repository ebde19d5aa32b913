// One deck key as the deck reader reads it: section, name, type and the
// value it has when the deck does not set it. The deck reference is made of these.
#pragma once
#include <string>

namespace trident {

struct DeckKey {
  std::string section, key, type, default_value;
};

}  // namespace trident
