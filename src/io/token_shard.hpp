// Token shards in llm.c's two formats (dev/data/data_common.py): a header of
// 256 int32 (magic, version, token count, the rest zero) followed by the
// tokens, little-endian: GPT-2 shards (magic 20240520, version 1) hold uint16
// tokens, Llama 3 shards (magic 20240801, version 7) uint32 tokens, for
// vocabularies above 65,536. A dataset may mix the two.
// A dataset is the concatenation of its shards (sorted glob matches), read as
// windows of seq_len + 1 tokens; window i starts at token i * seq_len. Window
// indices are global, so which sequences a step sees does not depend on the
// layout: rank r of a data group takes its own slice of the step's windows.
// Tokens are read with pread, not mapped: a mapping keeps every page it has
// touched in the process's RSS (the vocabulary scan alone touches the
// rank's slice of the data; training, in time, all of it).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.hpp"

namespace trident {

constexpr int kShardHeaderInts = 256;

// One of the two header kinds and the width of the tokens after it.
struct ShardFormat {
  std::int32_t magic;
  std::int32_t version;
  int token_bytes;   // 2: uint16 tokens, 4: uint32 tokens
  const char* name;  // as llm.c's write_datafile names it (model_desc)
  std::uint64_t max_vocab() const { return std::uint64_t(1) << (8 * token_bytes); }
};
inline constexpr ShardFormat kGpt2Shard{20240520, 1, 2, "gpt-2"};
inline constexpr ShardFormat kLlama3Shard{20240801, 7, 4, "llama-3"};

// The narrower format whose tokens hold every id below `vocab`.
const ShardFormat& shard_format_for_vocab(std::int64_t vocab);
// The format named `name` ("gpt-2" or "llama-3"); throws InputError otherwise.
const ShardFormat& shard_format_named(const std::string& name);

// Writes `tokens` in `format`; a token the format cannot hold is an InputError.
void write_token_shard(const std::string& path, const std::vector<std::uint32_t>& tokens,
                       const ShardFormat& format);
// A GPT-2 shard (uint16 tokens).
void write_token_shard(const std::string& path, const std::vector<std::uint16_t>& tokens);

class TokenDataset {
 public:
  // Opens and checks every shard (existence, magic, version, size). `role` is
  // the deck key named in errors ("data.train"). Local: no communication.
  TokenDataset(const std::vector<std::string>& patterns, int seq_len, std::string role);
  ~TokenDataset();
  TokenDataset(const TokenDataset&) = delete;
  TokenDataset& operator=(const TokenDataset&) = delete;

  // Collective over `comm`: every rank scans a slice, so each token is read once.
  // Throws InputError naming the file and position of a token >= vocab.
  void check_tokens(int vocab, Communicator& comm) const;

  std::uint64_t num_tokens() const { return total_; }
  std::uint64_t num_windows() const { return windows_; }
  const std::vector<std::string>& files() const { return files_; }
  // The format of shard `i` (in files() order).
  const ShardFormat& format(std::size_t i) const { return *shards_[i].format; }
  // Window `index` (taken modulo num_windows: the data repeats in epochs).
  void read_window(std::uint64_t index, std::int32_t* tokens, std::int32_t* targets) const;

 private:
  struct Shard {
    int fd = -1;
    const ShardFormat* format = nullptr;
    std::uint64_t count = 0, first = 0;
  };
  Shard open_shard(const std::string& file) const;
  std::uint32_t token_at(std::uint64_t pos) const;
  void read_tokens(std::uint64_t pos, std::uint64_t n, std::uint32_t* out) const;  // across shards
  std::vector<std::string> files_;
  std::vector<Shard> shards_;
  std::string role_;
  int seq_len_;
  std::uint64_t total_ = 0, windows_ = 0;
};

}  // namespace trident
