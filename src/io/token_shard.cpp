#include "io/token_shard.hpp"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <fmt/format.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>

#include "core/error.hpp"

namespace trident {
namespace {

constexpr std::size_t kHeaderBytes = kShardHeaderInts * sizeof(std::int32_t);

std::vector<std::string> expand(const std::string& pattern, const std::string& role) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (std::size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  if (out.empty())
    throw InputError(fmt::format("{} = \"{}\": no file matches; make the shards first (see "
                                 "README: trident tokenize) or fix the path", role, pattern));
  std::sort(out.begin(), out.end());
  return out;
}

// The format a header announces; the message says what is wrong otherwise.
const ShardFormat& format_of_header(const std::string& file, const std::int32_t* header) {
  for (const ShardFormat* f : {&kGpt2Shard, &kLlama3Shard}) {
    if (header[0] != f->magic) continue;
    if (header[1] == f->version) return *f;
    throw InputError(fmt::format(
        "{}: shard version {} is not supported for magic {} (expected {}: {} shards hold uint{} "
        "tokens); the header is corrupt or from another writer: re-make the shard with "
        "`trident tokenize`", file, header[1], f->magic, f->version, f->name, 8 * f->token_bytes));
  }
  throw InputError(fmt::format("{}: bad magic {} (expected {} for uint16 tokens or {} for uint32 "
                               "tokens): not a token shard; make one with `trident tokenize`",
                               file, header[0], kGpt2Shard.magic, kLlama3Shard.magic));
}

template <class T>
void write_shard(const std::string& path, const std::vector<T>& tokens, const ShardFormat& format) {
  if (tokens.size() > std::uint64_t(std::numeric_limits<std::int32_t>::max()))
    throw InputError(fmt::format("{}: {} tokens exceed one shard's int32 count; split the text",
                                 path, tokens.size()));
  std::int32_t header[kShardHeaderInts] = {};
  header[0] = format.magic;
  header[1] = format.version;
  header[2] = static_cast<std::int32_t>(tokens.size());
  std::ofstream out(path, std::ios::binary);
  if (!out)  // a directory, a missing folder, no permission: the user's to fix
    throw InputError(fmt::format("{}: cannot create the token shard: {}", path,
                                 std::strerror(errno)));
  out.write(reinterpret_cast<const char*>(header), sizeof(header));
  out.write(reinterpret_cast<const char*>(tokens.data()),
            std::streamsize(tokens.size() * sizeof(T)));
  if (!out) throw RuntimeFailure(fmt::format("{}: write failed", path));
}

}  // namespace

const ShardFormat& shard_format_for_vocab(std::int64_t vocab) {
  return std::uint64_t(vocab) <= kGpt2Shard.max_vocab() ? kGpt2Shard : kLlama3Shard;
}

const ShardFormat& shard_format_named(const std::string& name) {
  for (const ShardFormat* f : {&kGpt2Shard, &kLlama3Shard})
    if (name == f->name) return *f;
  throw InputError(fmt::format("--format {}: not a shard format; choose {} (uint16 tokens) or {} "
                               "(uint32 tokens)", name, kGpt2Shard.name, kLlama3Shard.name));
}

void write_token_shard(const std::string& path, const std::vector<std::uint32_t>& tokens,
                       const ShardFormat& format) {
  if (format.token_bytes == 4) return write_shard(path, tokens, format);
  std::vector<std::uint16_t> narrow(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= format.max_vocab())
      throw InputError(fmt::format("{}: token {} at position {} does not fit the {} format's "
                                   "uint16; write the {} format", path, tokens[i], i, format.name,
                                   kLlama3Shard.name));
    narrow[i] = std::uint16_t(tokens[i]);
  }
  write_shard(path, narrow, format);
}

void write_token_shard(const std::string& path, const std::vector<std::uint16_t>& tokens) {
  write_shard(path, tokens, kGpt2Shard);
}

TokenDataset::Shard TokenDataset::open_shard(const std::string& f) const {
  const int fd = ::open(f.c_str(), O_RDONLY);
  if (fd < 0) throw InputError(fmt::format("{}: cannot open ({})", f, role_));
  try {
    struct stat st {};
    ::fstat(fd, &st);
    const std::size_t bytes = std::size_t(st.st_size);
    std::int32_t header[kShardHeaderInts] = {};
    if (bytes < kHeaderBytes || ::pread(fd, header, kHeaderBytes, 0) != ssize_t(kHeaderBytes))
      throw InputError(fmt::format("{}: too short for a token shard header ({} bytes); the file "
                                   "is truncated or not a shard", f, bytes));
    const ShardFormat& format = format_of_header(f, header);
    const std::uint64_t count = std::uint64_t(std::uint32_t(header[2]));
    const std::uint64_t expected = kHeaderBytes + count * format.token_bytes;
    if (header[2] < 0 || bytes != expected)
      throw InputError(fmt::format("{}: header says {} tokens ({} bytes as {} tokens) but the file "
                                   "has {} bytes; the shard is truncated or corrupt", f, header[2],
                                   expected, format.name, bytes));
    Shard s;
    s.fd = fd;
    s.format = &format;
    s.count = count;
    return s;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

TokenDataset::TokenDataset(const std::vector<std::string>& patterns, int seq_len,
                           std::string role)
    : role_(std::move(role)), seq_len_(seq_len) {
  for (const auto& p : patterns)
    for (auto& f : expand(p, role_)) files_.push_back(std::move(f));
  try {
    for (const auto& f : files_) {
      Shard s = open_shard(f);
      s.first = total_;
      total_ += s.count;
      shards_.push_back(s);
    }
    if (total_ < std::uint64_t(seq_len_) + 1)
      throw InputError(fmt::format("{}: {} tokens in all, fewer than model.seq_len + 1 = {}; use "
                                   "more text or a shorter seq_len", role_, total_, seq_len_ + 1));
  } catch (...) {
    for (auto& s : shards_) ::close(s.fd);
    throw;
  }
  windows_ = (total_ - 1) / seq_len_;
}

TokenDataset::~TokenDataset() {
  for (auto& s : shards_) ::close(s.fd);
}

void TokenDataset::read_tokens(std::uint64_t pos, std::uint64_t n, std::uint32_t* out) const {
  std::size_t si = 0;
  while (shards_[si].first + shards_[si].count <= pos) ++si;
  while (n > 0) {
    const Shard& s = shards_[si++];
    const std::uint64_t k = std::min(n, s.first + s.count - pos);
    const int width = s.format->token_bytes;
    const std::size_t bytes = k * width;
    const off_t at = off_t(kHeaderBytes + (pos - s.first) * width);
    std::vector<std::uint16_t> narrow(width == 2 ? k : 0);
    void* to = width == 2 ? static_cast<void*>(narrow.data()) : static_cast<void*>(out);
    if (::pread(s.fd, to, bytes, at) != ssize_t(bytes))
      throw RuntimeFailure(fmt::format("{}: read failed at token {}: {}", files_[si - 1],
                                       pos - s.first, std::strerror(errno)));
    std::copy(narrow.begin(), narrow.end(), out);  // widened; empty for uint32 shards
    out += k, pos += k, n -= k;
  }
}

std::uint32_t TokenDataset::token_at(std::uint64_t pos) const {
  std::uint32_t t = 0;
  read_tokens(pos, 1, &t);
  return t;
}

void TokenDataset::read_window(std::uint64_t index, std::int32_t* tokens,
                               std::int32_t* targets) const {
  // Ids fit int32: check_tokens admits none at or above model.vocab.
  std::vector<std::uint32_t> w(std::size_t(seq_len_) + 1);
  read_tokens((index % windows_) * seq_len_, w.size(), w.data());
  for (int i = 0; i < seq_len_; ++i) {
    tokens[i] = std::int32_t(w[i]);
    targets[i] = std::int32_t(w[i + 1]);
  }
}

void TokenDataset::check_tokens(int vocab, Communicator& comm) const {
  const std::uint64_t P = comm.size(), r = comm.rank();
  const std::uint64_t lo = total_ * r / P, hi = total_ * (r + 1) / P;
  constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::max();
  std::int64_t first_bad = kNone;
  std::vector<std::uint32_t> chunk(std::size_t(1) << 20);
  for (std::uint64_t p = lo; p < hi && first_bad == kNone; p += chunk.size()) {
    const std::uint64_t n = std::min<std::uint64_t>(chunk.size(), hi - p);
    read_tokens(p, n, chunk.data());
    for (std::uint64_t i = 0; i < n && first_bad == kNone; ++i)
      if (chunk[i] >= std::uint32_t(vocab)) first_bad = std::int64_t(p + i);
  }
  comm.all_reduce(&first_bad, 1, DType::i64, ReduceOp::min);
  if (first_bad == kNone) return;
  std::size_t si = 0;
  while (shards_[si].first + shards_[si].count <= std::uint64_t(first_bad)) ++si;
  throw InputError(fmt::format("{}: token {} at position {} is >= model.vocab = {} ({}); "
                               "re-tokenize the data or raise model.vocab", files_[si],
                               token_at(first_bad), first_bad - shards_[si].first, vocab, role_));
}

}  // namespace trident
