#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "io/token_shard.hpp"
#include "io/tokenizer.hpp"

namespace trident {

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
    const auto tokens = tokenize_bytes(text);
    write_token_shard(o.output, tokens);
    fmt::print("wrote {} tokens (byte-level, model.vocab >= {}) to {}\n", tokens.size(),
               kByteVocab, o.output);
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
