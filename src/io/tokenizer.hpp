// Byte-level tokenizer: token = byte value (0..255), plus an end-of-text token.
// It needs no vocabulary file, so any text on any machine becomes a shard.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace trident {

constexpr std::uint16_t kEndOfText = 256;
constexpr int kByteVocab = 257;  // bytes + end-of-text: the smallest model.vocab that fits

std::vector<std::uint16_t> tokenize_bytes(std::string_view text);
std::string detokenize_bytes(const std::vector<std::uint16_t>& tokens);

}  // namespace trident
