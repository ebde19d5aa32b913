// trident tokenize: text (or another tokenizer's ids) to one token shard, in
// the narrower of llm.c's two formats that holds the vocabulary: uint16
// tokens up to 65,536 ids, uint32 tokens above (or the format asked for).
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "io/token_shard.hpp"
#include "io/tokenizer.hpp"

namespace trident {
namespace {

std::vector<std::uint32_t> tokens_of(const TokenizeOptions& o, const std::string& text) {
  if (o.ids) return read_token_ids(text, o.input);
  const auto bytes = tokenize_bytes(text);
  return {bytes.begin(), bytes.end()};
}

// The vocabulary the shard is for: --vocab, else what the tokens need.
std::int64_t vocab_of(const TokenizeOptions& o, const std::vector<std::uint32_t>& tokens) {
  if (o.vocab == 0)
    return o.ids ? (tokens.empty() ? 1 : std::int64_t(*std::max_element(tokens.begin(), tokens.end())) + 1)
                 : kByteVocab;
  if (o.vocab < 1) throw InputError(fmt::format("--vocab {}: must be at least 1", o.vocab));
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] >= std::uint64_t(o.vocab))
      throw InputError(fmt::format("{}: token {} at position {} is >= --vocab {}; raise --vocab "
                                   "to the model's vocabulary", o.input, tokens[i], i, o.vocab));
  return o.vocab;
}

}  // namespace

int tokenize_command(const TokenizeOptions& o) {
  std::string text;
  if (o.input == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), {});
  } else {
    std::ifstream in(o.input, std::ios::binary);
    if (!in) {
      fmt::print(stderr, "error: {}: cannot open the input text\n", o.input);
      return kExitBadInput;
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  try {
    const auto tokens = tokens_of(o, text);
    const std::int64_t vocab = vocab_of(o, tokens);
    const ShardFormat& format =
        o.format.empty() ? shard_format_for_vocab(vocab) : shard_format_named(o.format);
    write_token_shard(o.output, tokens, format);
    fmt::print("wrote {} tokens ({}, model.vocab >= {}) to {} as a {} shard (uint{} tokens)\n",
               tokens.size(), o.ids ? "token ids" : "byte-level", vocab, o.output, format.name,
               8 * format.token_bytes);
  } catch (const InputError& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return kExitBadInput;
  } catch (const RuntimeFailure& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return kExitRuntime;
  }
  return kExitOk;
}

}  // namespace trident
