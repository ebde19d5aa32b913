// Byte-level tokenizer: token = byte value (0..255), plus an end-of-text token.
// It needs no vocabulary file, so any text on any machine becomes a shard.
// Token ids made by another tokenizer (tiktoken's, a SentencePiece model's)
// come in as decimal text and are written as they are.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trident {

constexpr std::uint16_t kEndOfText = 256;
constexpr int kByteVocab = 257;  // bytes + end-of-text: the smallest model.vocab that fits

std::vector<std::uint16_t> tokenize_bytes(std::string_view text);
std::string detokenize_bytes(const std::vector<std::uint16_t>& tokens);

// Whitespace-separated decimal ids, each below 2^32. Throws InputError naming
// `origin` and the offending word's byte offset.
std::vector<std::uint32_t> read_token_ids(std::string_view text, const std::string& origin);

}  // namespace trident
