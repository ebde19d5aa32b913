// Token shards: round trip, windows, globs, and every kind of bad shard.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <fstream>

#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "io/token_shard.hpp"
#include "io/tokenizer.hpp"
#include "support/test_support.hpp"

using namespace trident;

namespace {
std::string dir() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return trident::testing::scratch_dir("shards_r" + std::to_string(r));
}
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}
void write_raw(const std::string& path, const std::vector<std::int32_t>& header, std::size_t tokens) {
  std::ofstream out(path, std::ios::binary);
  std::vector<std::int32_t> h(256, 0);
  std::copy(header.begin(), header.end(), h.begin());
  out.write(reinterpret_cast<const char*>(h.data()), 1024);
  std::vector<std::uint16_t> t(tokens, 65);
  out.write(reinterpret_cast<const char*>(t.data()), std::streamsize(t.size() * 2));
}
}  // namespace

TEST(Shards, WindowsAreConsecutiveSliceOfTheConcatenation) {
  const std::string d = dir();
  std::vector<std::uint16_t> a(50), b(31);
  for (int i = 0; i < 50; ++i) a[i] = std::uint16_t(i);
  for (int i = 0; i < 31; ++i) b[i] = std::uint16_t(50 + i);
  write_token_shard(d + "/part_000.bin", a);
  write_token_shard(d + "/part_001.bin", b);
  TokenDataset ds({d + "/part_*.bin"}, 8, "data.train");
  EXPECT_EQ(ds.num_tokens(), 81u);
  EXPECT_EQ(ds.num_windows(), 10u);  // (81 - 1) / 8
  std::vector<std::int32_t> tok(8), tgt(8);
  ds.read_window(6, tok.data(), tgt.data());  // crosses the shard boundary at 50
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(tok[i], 48 + i);
    EXPECT_EQ(tgt[i], 49 + i);
  }
  ds.read_window(16, tok.data(), tgt.data());  // wraps: window 6 again
  EXPECT_EQ(tok[0], 48);
  auto comm = make_communicator(MPI_COMM_WORLD, "world");
  EXPECT_NO_THROW(ds.check_tokens(81, *comm));
}

TEST(Shards, BadShardsNameTheFileAndTheProblem) {
  const std::string d = dir();
  write_raw(d + "/magic.bin", {12345, 1, 10}, 10);
  write_raw(d + "/version.bin", {kShardMagic, 2, 10}, 10);
  write_raw(d + "/truncated.bin", {kShardMagic, 1, 100}, 10);
  std::ofstream(d + "/short.bin") << "tiny";
  EXPECT_NE(error_of([&] { TokenDataset({d + "/magic.bin"}, 4, "data.train"); }).find(d + "/magic.bin: bad magic 12345"), std::string::npos);
  EXPECT_NE(error_of([&] { TokenDataset({d + "/version.bin"}, 4, "data.train"); }).find("shard version 2 is not supported"), std::string::npos);
  EXPECT_NE(error_of([&] { TokenDataset({d + "/truncated.bin"}, 4, "data.train"); }).find("truncated.bin: header says 100 tokens"), std::string::npos);
  EXPECT_NE(error_of([&] { TokenDataset({d + "/short.bin"}, 4, "data.train"); }).find("too short"), std::string::npos);
  EXPECT_NE(error_of([&] { TokenDataset({d + "/nothing_*.bin"}, 4, "data.val"); }).find("data.val = \"" + d + "/nothing_*.bin\": no file matches"), std::string::npos);
  write_token_shard(d + "/few.bin", {1, 2, 3});
  EXPECT_NE(error_of([&] { TokenDataset({d + "/few.bin"}, 8, "data.train"); }).find("fewer than model.seq_len + 1"), std::string::npos);
}

TEST(Shards, TokenBeyondTheVocabularyIsFoundByTheCollectiveScan) {
  const std::string d = dir();
  std::vector<std::uint16_t> t(1000, 5);
  t[777] = 300;
  write_token_shard(d + "/vocab.bin", t);
  TokenDataset ds({d + "/vocab.bin"}, 16, "data.train");
  auto comm = make_communicator(MPI_COMM_WORLD, "world");
  const std::string e = error_of([&] { ds.check_tokens(257, *comm); });
  EXPECT_NE(e.find("vocab.bin: token 300 at position 777 is >= model.vocab = 257"), std::string::npos) << e;
  EXPECT_NO_THROW(ds.check_tokens(301, *comm));
}

TEST(Tokenizer, BytesRoundTripWithEndOfText) {
  const std::string text = "Hello, 世界\n";
  auto tokens = tokenize_bytes(text);
  ASSERT_EQ(tokens.size(), text.size() + 1);
  EXPECT_EQ(tokens[0], kEndOfText);
  EXPECT_EQ(detokenize_bytes(tokens), text);
}
