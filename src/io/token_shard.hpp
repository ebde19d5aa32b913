// Token shards in llm.c's format: a header of 256 int32 (magic 20240520,
// version 1, token count, rest zero) followed by the tokens as uint16.
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

constexpr std::int32_t kShardMagic = 20240520;
constexpr std::int32_t kShardVersion = 1;
constexpr int kShardHeaderInts = 256;

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
  // Window `index` (taken modulo num_windows: the data repeats in epochs).
  void read_window(std::uint64_t index, std::int32_t* tokens, std::int32_t* targets) const;

 private:
  std::uint16_t token_at(std::uint64_t pos) const;
  void read_tokens(std::uint64_t pos, std::uint64_t n, std::uint16_t* out) const;  // across shards
  struct Shard {
    int fd = -1;
    std::uint64_t count = 0, first = 0;
  };
  std::vector<std::string> files_;
  std::vector<Shard> shards_;
  std::string role_;
  int seq_len_;
  std::uint64_t total_ = 0, windows_ = 0;
};

}  // namespace trident
