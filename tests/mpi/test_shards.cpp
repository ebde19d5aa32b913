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
// A header as given, then `tokens` tokens of `width` bytes each.
void write_raw(const std::string& path, const std::vector<std::int32_t>& header, std::size_t tokens,
               int width = 2) {
  std::ofstream out(path, std::ios::binary);
  std::vector<std::int32_t> h(256, 0);
  std::copy(header.begin(), header.end(), h.begin());
  out.write(reinterpret_cast<const char*>(h.data()), 1024);
  std::vector<char> t(tokens * width, 65);
  out.write(t.data(), std::streamsize(t.size()));
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
  write_raw(d + "/version.bin", {kGpt2Shard.magic, 2, 10}, 10);
  write_raw(d + "/truncated.bin", {kGpt2Shard.magic, 1, 100}, 10);
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

TEST(Shards, Uint32ShardsReadBackAndMixWithUint16Ones) {
  const std::string d = dir();
  std::vector<std::uint32_t> big(40);
  for (int i = 0; i < 40; ++i) big[i] = 70000u + 4096u * std::uint32_t(i);  // up to 229,744
  write_token_shard(d + "/mix_000.bin", std::vector<std::uint16_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  write_token_shard(d + "/mix_001.bin", big, kLlama3Shard);
  {  // the header as llm.c writes it, and 4 bytes per token
    std::ifstream in(d + "/mix_001.bin", std::ios::binary);
    std::int32_t h[3];
    in.read(reinterpret_cast<char*>(h), sizeof(h));
    EXPECT_EQ(h[0], 20240801);
    EXPECT_EQ(h[1], 7);
    EXPECT_EQ(h[2], 40);
    EXPECT_EQ(std::filesystem::file_size(d + "/mix_001.bin"), 1024u + 40u * 4u);
  }
  TokenDataset ds({d + "/mix_*.bin"}, 4, "data.train");
  EXPECT_STREQ(ds.format(0).name, "gpt-2");
  EXPECT_STREQ(ds.format(1).name, "llama-3");
  EXPECT_EQ(ds.num_tokens(), 50u);
  std::vector<std::int32_t> tok(4), tgt(4);
  ds.read_window(2, tok.data(), tgt.data());  // tokens 8..11: crosses from uint16 to uint32
  EXPECT_EQ(tok, (std::vector<std::int32_t>{9, 10, 70000, 74096}));
  EXPECT_EQ(tgt, (std::vector<std::int32_t>{10, 70000, 74096, 78192}));
  auto comm = make_communicator(MPI_COMM_WORLD, "world");
  EXPECT_NO_THROW(ds.check_tokens(229745, *comm));
  const std::string e = error_of([&] { ds.check_tokens(131072, *comm); });
  // 70000 + 4096 * 15 = 131,440: the first id at or above the vocabulary.
  EXPECT_NE(e.find("mix_001.bin: token 131440 at position 15 is >= model.vocab = 131072 "
                   "(data.train); re-tokenize the data or raise model.vocab"), std::string::npos) << e;
}

TEST(Shards, FormatFollowsTheVocabulary) {
  EXPECT_STREQ(shard_format_for_vocab(257).name, "gpt-2");
  EXPECT_STREQ(shard_format_for_vocab(65536).name, "gpt-2");  // ids 0..65535 fit uint16
  EXPECT_STREQ(shard_format_for_vocab(65537).name, "llama-3");
  EXPECT_STREQ(shard_format_for_vocab(128256).name, "llama-3");
  EXPECT_STREQ(shard_format_named("llama-3").name, "llama-3");
  EXPECT_NE(error_of([] { shard_format_named("gpt-4"); }).find("--format gpt-4: not a shard format"), std::string::npos);
  // A uint16 shard cannot hold 65,536: refused, not wrapped to 0.
  const std::string d = dir();
  const std::string e = error_of([&] { write_token_shard(d + "/narrow.bin", {5, 65536}, kGpt2Shard); });
  EXPECT_NE(e.find("narrow.bin: token 65536 at position 1 does not fit the gpt-2 format's uint16"), std::string::npos) << e;
}

TEST(Shards, MismatchedUint32HeadersAreRefused) {
  const std::string d = dir();
  // The Llama 3 magic with GPT-2's version, and the reverse.
  write_raw(d + "/l3_version.bin", {kLlama3Shard.magic, 1, 10}, 10, 4);
  write_raw(d + "/g2_version.bin", {kGpt2Shard.magic, 7, 10}, 10, 2);
  // A Llama 3 header over uint16 tokens: the size gives it away.
  write_raw(d + "/l3_narrow.bin", {kLlama3Shard.magic, 7, 10}, 10, 2);
  // A GPT-2 header over uint32 tokens.
  write_raw(d + "/g2_wide.bin", {kGpt2Shard.magic, 1, 10}, 10, 4);
  write_raw(d + "/negative.bin", {kLlama3Shard.magic, 7, -4}, 0, 4);
  auto open = [&](const std::string& f) { return error_of([&] { TokenDataset({d + f}, 4, "data.train"); }); };
  EXPECT_NE(open("/l3_version.bin").find("l3_version.bin: shard version 1 is not supported for magic 20240801 (expected 7: llama-3 shards hold uint32 tokens)"), std::string::npos) << open("/l3_version.bin");
  EXPECT_NE(open("/g2_version.bin").find("shard version 7 is not supported for magic 20240520 (expected 1: gpt-2 shards hold uint16 tokens)"), std::string::npos);
  EXPECT_NE(open("/l3_narrow.bin").find("l3_narrow.bin: header says 10 tokens (1064 bytes as llama-3 tokens) but the file has 1044 bytes"), std::string::npos) << open("/l3_narrow.bin");
  EXPECT_NE(open("/g2_wide.bin").find("header says 10 tokens (1044 bytes as gpt-2 tokens) but the file has 1064 bytes"), std::string::npos);
  EXPECT_NE(open("/negative.bin").find("header says -4 tokens"), std::string::npos);
  EXPECT_EQ(open("/l3_version.bin").find("bad magic"), std::string::npos);  // a version error, not a magic one
}

TEST(Tokenizer, TokenIdsFromText) {
  EXPECT_EQ(read_token_ids(" 0 65535\n65536\t128255  4294967295\n", "ids.txt"),
            (std::vector<std::uint32_t>{0, 65535, 65536, 128255, 4294967295u}));
  EXPECT_TRUE(read_token_ids(" \n", "ids.txt").empty());
  EXPECT_NE(error_of([] { read_token_ids("1 2 x3 4", "ids.txt"); }).find("ids.txt: \"x3\" at byte 4 is not a token id"), std::string::npos);
  EXPECT_NE(error_of([] { read_token_ids("1 -2", "ids.txt"); }).find("\"-2\" at byte 2"), std::string::npos);
  EXPECT_NE(error_of([] { read_token_ids("4294967296", "ids.txt"); }).find("is not a token id"), std::string::npos);
}

TEST(Tokenizer, BytesRoundTripWithEndOfText) {
  const std::string text = "Hello, 世界\n";
  auto tokens = tokenize_bytes(text);
  ASSERT_EQ(tokens.size(), text.size() + 1);
  EXPECT_EQ(tokens[0], kEndOfText);
  EXPECT_EQ(detokenize_bytes(tokens), text);
}
