// The deck reference as Markdown (docs/decks.md), made from the deck reader.
#pragma once
#include <string>

namespace trident {

std::string deck_reference_markdown();

}  // namespace trident
