// parallel.cp in the deck: the grid it resolves to and every refusal, each
// naming the field and the fix.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "io/deck.hpp"

using namespace trident;

namespace {

const std::string kDeck = R"([model]
layers = 2
d_model = 32
heads = 4
seq_len = 16
vocab = 257
[train]
batch = 4
micro_batch = 1
[data]
train = "x.bin"
)";

// The deck reader's or resolve_layout's InputError message on `world` ranks
// ("" if both accept).
std::string refusal(std::vector<std::string> sets, int world) {
  try {
    Deck d = parse_deck(kDeck, "t.toml", std::move(sets));
    resolve_layout(d, world);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(DeckContext, DefaultIsOneAndKeepsTheGridAsItWas) {
  Deck d = parse_deck(kDeck, "t.toml", {"parallel.tp=2"});
  EXPECT_EQ(d.parallel.cp, 1);
  const GridShape s = resolve_layout(d, 4);
  EXPECT_EQ(s.cp, 1);
  EXPECT_EQ(s.dp, 2);
  EXPECT_EQ(s.size(), 4);
}

TEST(DeckContext, RefusesWhatItCannotDo) {
  EXPECT_TRUE(has(refusal({"parallel.cp=0"}, 1), "cp = 0 must be at least 1"));
  // 16 tokens in 2 * 3 = 6 chunks.
  const std::string chunks = refusal({"parallel.cp=3"}, 3);
  EXPECT_TRUE(has(chunks, "cp = 3 cuts each sequence into 2 * cp = 6 equal chunks")) << chunks;
  EXPECT_TRUE(has(chunks, "choose seq_len as a multiple of 6")) << chunks;
  // Grouped-query attention rides the ring (one query head at a time).
  EXPECT_EQ(refusal({"parallel.cp=2", "model.kv_heads=2"}, 2), "");
  EXPECT_TRUE(has(refusal({"parallel.cp=2", "parallel.pp=2", "parallel.schedule=\"pipedream\""}, 4),
                  "not supported with schedule = \"pipedream\""));
  EXPECT_TRUE(has(refusal({"parallel.cp=2", "parallel.dp_mode=\"gather\""}, 2),
                  "cp = 2 needs dp_mode = \"allreduce\""));
  // Sequence parallelism splits a context rank's rows: 12 / 2 = 6 over tp 4.
  EXPECT_TRUE(has(refusal({"parallel.cp=2", "parallel.tp=4", "parallel.sequence_parallel=true",
                           "model.seq_len=12"}, 8),
                  "micro_batch * seq_len / cp = 6 tokens over tp = 4"));
  // The ranks: tp * pp * cp must divide the world.
  EXPECT_TRUE(has(refusal({"parallel.cp=4"}, 2), "tp * pp * cp = 4 does not divide the 2 ranks"));
  EXPECT_TRUE(has(refusal({"parallel.cp=2", "parallel.dp=2"}, 2),
                  "dp * tp * pp * cp = 2 * 1 * 1 * 2 = 4 but the job has 2 ranks"));
}
