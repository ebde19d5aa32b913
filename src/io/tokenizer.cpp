#include "io/tokenizer.hpp"

#include <fmt/format.h>

#include <cctype>
#include <charconv>

#include "core/error.hpp"

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

std::vector<std::uint32_t> read_token_ids(std::string_view text, const std::string& origin) {
  std::vector<std::uint32_t> out;
  const char* p = text.data();
  const char* end = p + text.size();
  auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (true) {
    while (p < end && space(*p)) ++p;
    if (p == end) return out;
    const char* word = p;
    while (p < end && !space(*p)) ++p;
    std::uint32_t id = 0;
    const auto [stop, ec] = std::from_chars(word, p, id);
    if (ec != std::errc() || stop != p)
      throw InputError(fmt::format("{}: \"{}\" at byte {} is not a token id (a decimal integer "
                                   "in [0, 2^32)); give one id per word, whitespace between",
                                   origin, std::string_view(word, std::size_t(p - word)).substr(0, 24),
                                   word - text.data()));
    out.push_back(id);
  }
}

}  // namespace trident
