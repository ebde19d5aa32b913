// Which rows of a micro-batch the model computes (model/token_layout.hpp):
// runs of positions, and the design's test that a split of every sequence
// over ranks needs no change of the model, only another attention operator.
// Two models each hold a load-balanced half of every sequence (chunks 0 and
// 3, chunks 1 and 2: context parallelism's split at 2 ranks) and attend over
// the whole sequence through an operator that exchanges rows; their losses
// and gradients add up to the one model's that holds every token.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <numeric>
#include <thread>
#include <vector>

#include "compute/backend.hpp"
#include "compute/llama_ops.hpp"
#include "memory/ledger.hpp"
#include "model/gpt.hpp"
#include "support/sequence_rows.hpp"

using namespace trident;

TEST(TokenLayout, WholeSequencesAreOneRunEach) {
  const TokenLayout t(3, 8);
  EXPECT_TRUE(t.whole_sequences());
  EXPECT_EQ(t.rows(), 24);
  const std::vector<PositionRun> runs = t.runs_of_rows(6, 12);  // rows 6..17
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].row, 0); EXPECT_EQ(runs[0].position, 6); EXPECT_EQ(runs[0].count, 2);
  EXPECT_EQ(runs[1].row, 2); EXPECT_EQ(runs[1].position, 0); EXPECT_EQ(runs[1].count, 8);
  EXPECT_EQ(runs[2].row, 10); EXPECT_EQ(runs[2].position, 0); EXPECT_EQ(runs[2].count, 2);
}

TEST(TokenLayout, ChunksKeepTheirPositionsAcrossASlice) {
  // Chunks 1 and 2 of 4 in a sequence of 16: positions 4..7 then 8..11, a
  // slice of rows 2..9 (two sequences of 4 + 4 rows).
  const TokenLayout t(2, 16, {{0, 4, 4}, {4, 8, 4}});
  EXPECT_FALSE(t.whole_sequences());
  EXPECT_EQ(t.rows_per_sequence(), 8);
  const std::vector<PositionRun> runs = t.runs_of_rows(2, 8);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].position, 6); EXPECT_EQ(runs[0].count, 2);
  EXPECT_EQ(runs[1].row, 2); EXPECT_EQ(runs[1].position, 8); EXPECT_EQ(runs[1].count, 4);
  EXPECT_EQ(runs[2].row, 6); EXPECT_EQ(runs[2].position, 4); EXPECT_EQ(runs[2].count, 2);
  EXPECT_THROW(TokenLayout(1, 16, {{0, 4, 4}, {5, 8, 4}}), std::invalid_argument);  // a gap
  EXPECT_THROW(TokenLayout(1, 16, {{0, 14, 4}}), std::invalid_argument);  // past the end
}

namespace {

constexpr int kShares = 2;

// Attention over whole sequences for models that each hold some rows of every
// sequence: each publishes its rows, every one assembles the sequences in
// position order, runs the backend's kernels on them and keeps its own rows.
class SharedSequences {
 public:
  SharedSequences(const std::vector<TokenLayout>& layouts) : layouts_(layouts), sync_(kShares) {}
  struct Rows {  // one share's published buffers for a pass
    const float *qkv = nullptr, *out = nullptr, *lse = nullptr, *dout = nullptr;
  };
  void forward(int share, ComputeBackend& be, float* out, float* lse, const float* qkv,
               const AttentionShape& s) {
    published_[share] = {qkv, nullptr, nullptr, nullptr};
    sync_.arrive_and_wait();
    const int T = layouts_[0].seq_len(), W3 = qkv_width(s);
    std::vector<float> q = assemble(&Rows::qkv, s.batch, W3), o(std::size_t(s.batch) * T * s.width),
                       l(std::size_t(s.batch) * s.heads * T);
    if (s.grouped())
      be.llama_ops().gqa_attention_forward(o.data(), l.data(), q.data(), s.batch, T, s.heads,
                                           s.kv_heads, s.head_size());
    else
      be.attention_forward(o.data(), l.data(), q.data(), s.batch, T, s.width, s.heads);
    keep_rows(share, out, o, s.batch, s.width);
    keep_lse(share, lse, l, s);
    sync_.arrive_and_wait();
  }
  void backward(int share, ComputeBackend& be, float* dqkv, const float* dout, const float* qkv,
                const float* out, const float* lse, const AttentionShape& s) {
    published_[share] = {qkv, out, lse, dout};
    sync_.arrive_and_wait();
    const int T = layouts_[0].seq_len(), W3 = qkv_width(s);
    std::vector<float> q = assemble(&Rows::qkv, s.batch, W3), o = assemble(&Rows::out, s.batch, s.width),
                       d = assemble(&Rows::dout, s.batch, s.width), l = assemble_lse(s),
                       dq(std::size_t(s.batch) * T * W3, 0.0f);
    if (s.grouped())
      be.llama_ops().gqa_attention_backward(dq.data(), d.data(), q.data(), o.data(), l.data(),
                                            s.batch, T, s.heads, s.kv_heads, s.head_size());
    else
      be.attention_backward(dq.data(), d.data(), q.data(), o.data(), l.data(), s.batch, T,
                            s.width, s.heads);
    std::vector<float> mine(std::size_t(layouts_[share].rows()) * W3);
    keep_rows(share, mine.data(), dq, s.batch, W3);
    for (std::size_t i = 0; i < mine.size(); ++i) dqkv[i] += mine[i];
    sync_.arrive_and_wait();
  }

 private:
  static int qkv_width(const AttentionShape& s) {  // q, k and v of a row
    return (s.heads + 2 * (s.kv_heads > 0 ? s.kv_heads : s.heads)) * s.head_size();
  }
  // Every share's rows of a (rows, width) buffer placed at their positions.
  std::vector<float> assemble(const float* Rows::*field, int B, int width) const {
    std::vector<float> full(std::size_t(B) * layouts_[0].seq_len() * width);
    for (int sh = 0; sh < kShares; ++sh)
      trident::testing::place_rows(layouts_[sh], B, width, published_[sh].*field, full.data());
    return full;
  }
  std::vector<float> assemble_lse(const AttentionShape& s) const {  // (B, heads, rows) each
    std::vector<float> full(std::size_t(s.batch) * s.heads * layouts_[0].seq_len());
    for (int sh = 0; sh < kShares; ++sh)
      trident::testing::place_rows(layouts_[sh], s.batch * s.heads, 1, published_[sh].lse,
                                   full.data());
    return full;
  }
  void keep_rows(int share, float* out, const std::vector<float>& full, int B, int width) const {
    trident::testing::take_rows(layouts_[share], B, width, full.data(), out);
  }
  void keep_lse(int share, float* lse, const std::vector<float>& full, const AttentionShape& s) const {
    trident::testing::take_rows(layouts_[share], s.batch * s.heads, 1, full.data(), lse);
  }
  std::vector<TokenLayout> layouts_;
  Rows published_[kShares];
  std::barrier<> sync_;
};

struct SharedAttention final : AttentionOp {
  SharedAttention(SharedSequences& s, int share, ComputeBackend& be) : seqs(s), share(share), be(be) {}
  void forward(float* out, float* lse, MatrixIn qkv, const AttentionShape& s, bool) override {
    seqs.forward(share, be, out, lse, qkv.values, s);
  }
  void backward(float* dqkv, MatrixIn dout, MatrixIn qkv, const float* out, const float* lse,
                const AttentionShape& s, bool) override {
    seqs.backward(share, be, dqkv, dout.values, qkv.values, out, lse, s);
  }
  void forward_rounded(float*, std::uint16_t*, float*, MatrixIn, const AttentionShape&) override {
    FAIL() << "an f32 test";
  }
  void backward_rounded(float*, std::uint16_t*, MatrixIn, MatrixIn, const float*, const float*,
                        const AttentionShape&) override {
    FAIL() << "an f32 test";
  }
  SharedSequences& seqs;
  int share;
  ComputeBackend& be;
};

struct PassOfRows {
  double loss = 0;
  std::vector<float> grads;
};

// One model's pass over its rows of the micro-batch (ids from its positions).
PassOfRows run_model(const GptConfig& c, int B, const TokenLayout& tokens, AttentionOp* attention) {
  auto be = make_cpu_backend(1);
  MemoryLedger ledger;
  GptModelOptions o;
  o.tokens = tokens;
  o.attention = attention;
  GptModel m(c, B, *be, ledger, o);
  MicroBatchStorage storage(m, *be, ledger);
  m.init_parameters(11);
  m.grads().zero();
  std::vector<std::int32_t> tok(tokens.rows()), tgt(tokens.rows());
  for (const PositionRun& r : tokens.runs_of_rows(0, tokens.rows()))
    for (int i = 0; i < r.count; ++i) {
      const int b = (r.row + i) / tokens.rows_per_sequence(), pos = r.position + i;
      tok[r.row + i] = (7 * b + 3 * pos + 1) % c.vocab, tgt[r.row + i] = (5 * b + pos * pos + 2) % c.vocab;
    }
  PassOfRows p;
  p.loss = m.forward(storage.acts(), tok.data(), tgt.data(), 1.0f / float(B * c.seq_len));
  m.backward(storage.acts(), nullptr, true);
  p.grads.assign(m.grads().f32(), m.grads().f32() + m.grads().numel());
  return p;
}

}  // namespace

namespace {
// Two models on the halves of every sequence against the one model.
void expect_halves_add_up(const GptConfig& c) {
  const int B = 2, chunk = c.seq_len / 4;
  const PassOfRows whole = run_model(c, B, TokenLayout(B, c.seq_len), nullptr);
  const std::vector<TokenLayout> halves = {
      TokenLayout(B, c.seq_len, {{0, 0, chunk}, {chunk, 3 * chunk, chunk}}),
      TokenLayout(B, c.seq_len, {{0, chunk, chunk}, {chunk, 2 * chunk, chunk}})};
  SharedSequences seqs(halves);
  PassOfRows part[kShares];
  std::vector<std::thread> threads;
  for (int s = 0; s < kShares; ++s)
    threads.emplace_back([&, s] {
      auto be = make_cpu_backend(1);
      SharedAttention attention(seqs, s, *be);
      part[s] = run_model(c, B, halves[s], &attention);
    });
  for (std::thread& t : threads) t.join();
  EXPECT_NEAR(part[0].loss + part[1].loss, whole.loss, 1e-5 * std::abs(whole.loss));
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < whole.grads.size(); ++i) {
    const double d = double(part[0].grads[i]) + part[1].grads[i] - whole.grads[i];
    diff += d * d, norm += double(whole.grads[i]) * whole.grads[i];
  }
  EXPECT_LT(std::sqrt(diff / norm), 1e-5);
  EXPECT_NE(part[0].grads, whole.grads);  // each half alone is not the whole
}
}  // namespace

TEST(TokenLayout, ASplitOfEverySequenceNeedsOnlyAnotherAttention) {
  expect_halves_add_up(GptConfig{2, 16, 4, 32, 97});
}

// The Llama family: rotary angles follow each chunk's positions, and
// grouped-query attention's rows are q, k and v of fewer key/value heads.
TEST(TokenLayout, LlamaChunksRotateByTheirPositions) {
  GptConfig c{2, 16, 4, 32, 97};
  c.kv_heads = 2;
  c.positions = PositionEncoding::rope;
  c.norm = NormKind::rmsnorm;
  c.mlp = MlpKind::swiglu;
  c.bias = false;
  c.tied_embeddings = false;
  expect_halves_add_up(c);
}
