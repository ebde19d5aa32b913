#include "io/tokenizer.hpp"

#include <string>

namespace trident {

std::vector<std::uint16_t> tokenize_bytes(std::string_view text) {
  std::vector<std::uint16_t> out;
  out.reserve(text.size() + 1);
  out.push_back(kEndOfText);  // documents start with end-of-text, so shards concatenate cleanly
  for (unsigned char c : text) out.push_back(c);
  return out;
}

std::string detokenize_bytes(const std::vector<std::uint16_t>& tokens) {
  std::string s;
  for (auto t : tokens)
    if (t < 256) s.push_back(static_cast<char>(t));
  return s;
}

}  // namespace trident
