// Ring attention (parallel/context) on context groups of 1, 2 and 4 ranks
// against the backend's attention over the whole sequence: each rank's rows
// of the output, the log-sum-exp and the q, k, v gradients equal the whole
// sequence's at those positions within f32 rounding, with as many key/value
// heads as query heads, half as many and one. Also the load-balanced
// split itself, and a rank's tokens.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "compute/backend.hpp"
#include "grid/grid.hpp"
#include "model/attention_op.hpp"
#include "parallel/context/ring_attention.hpp"
#include "support/random_values.hpp"
#include "support/sequence_rows.hpp"

using namespace trident;

namespace {

using Vec = std::vector<float>;

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// max |a - b| over max(1, max |b|).
double relative_gap(const Vec& a, const Vec& b) {
  double gap = 0, size = 1;
  for (std::size_t i = 0; i < a.size(); ++i) {
    gap = std::max(gap, double(std::abs(a[i] - b[i])));
    size = std::max(size, double(std::abs(b[i])));
  }
  return gap / size;
}

// The rows of (B, T, width) `all` at this rank's positions.
Vec rank_rows(const ContextChunks& c, const Vec& all, int B, int width) {
  Vec mine(std::size_t(B) * c.rows() * width);
  trident::testing::take_rows(context_token_layout(c, B), B, width, all.data(), mine.data());
  return mine;
}

// lse (B, NH, T) at this rank's positions: B x NH sequences of one value a row.
Vec rank_lse(const ContextChunks& c, const Vec& all, int B, int NH) {
  Vec mine(std::size_t(B) * NH * c.rows());
  trident::testing::take_rows(context_token_layout(c, B), B * NH, 1, all.data(), mine.data());
  return mine;
}

struct Whole {
  Vec qkv, dout, out, lse, dqkv;
};

// Attention over whole sequences, as LocalAttention computes it (KV key/value heads).
Whole whole_attention(ComputeBackend& backend, int B, int T, int C, int NH, int KV) {
  const int row = C + 2 * KV * (C / NH);
  Whole w;
  w.qkv = trident::testing::random_normals(std::size_t(B) * T * row, 7);
  w.dout = trident::testing::random_normals(std::size_t(B) * T * C, 8);
  w.out.resize(std::size_t(B) * T * C);
  w.lse.resize(std::size_t(B) * NH * T);
  w.dqkv.assign(w.qkv.size(), 0.f);
  LocalAttention local(backend);
  const AttentionShape s{B, T, C, NH, KV};
  local.forward(w.out.data(), w.lse.data(), w.qkv.data(), s, false);
  local.backward(w.dqkv.data(), w.dout.data(), w.qkv.data(), w.out.data(), w.lse.data(), s, false);
  return w;
}

void expect_ring_equals_whole(Communicator& ring, ComputeBackend& backend, int KV) {
  const int B = 2, T = 160, C = 32, NH = 4, row = C + 2 * KV * (C / NH);
  const Whole w = whole_attention(backend, B, T, C, NH, KV);
  MemoryLedger ledger;
  RingAttention op(backend, ledger, ring, T);
  const ContextChunks& c = op.chunks();
  const AttentionShape s{B, c.rows(), C, NH, KV};
  const Vec qkv = rank_rows(c, w.qkv, B, row), dout = rank_rows(c, w.dout, B, C);
  Vec out(std::size_t(B) * c.rows() * C), lse(std::size_t(B) * NH * c.rows());
  op.forward(out.data(), lse.data(), qkv.data(), s, false);
  const std::string at = "cp " + std::to_string(ring.size()) + ", kv heads " + std::to_string(KV);
  EXPECT_LT(relative_gap(out, rank_rows(c, w.out, B, C)), 2e-6) << at;
  EXPECT_LT(relative_gap(lse, rank_lse(c, w.lse, B, NH)), 2e-6) << at;
  Vec dqkv(qkv.size(), 1.0f);  // backward adds to what is there
  op.backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s, false);
  Vec expected = rank_rows(c, w.dqkv, B, row);
  for (float& x : expected) x += 1.0f;
  EXPECT_LT(relative_gap(dqkv, expected), 1e-5) << at;
  // Rounded: written (not added to), each value a bf16 value.
  std::vector<std::uint16_t> bits(dqkv.size());
  op.backward_rounded(dqkv.data(), bits.data(), dout.data(), qkv.data(), out.data(), lse.data(),
                      s);
  EXPECT_LT(relative_gap(dqkv, rank_rows(c, w.dqkv, B, row)), 1e-2) << at;
  // The ring's buffers, as the memory estimate counts them: five blocks of
  // keys and values (two travelling, two gradient shares, one arriving); one
  // rank alone needs three (no transfers).
  const std::size_t five = RingAttention::buffer_floats(B, c.rows(), KV * (C / NH)) * sizeof(float);
  EXPECT_EQ(ledger.peak(MemCategory::buffers), ring.size() > 1 ? five : five / 5 * 3);
}

}  // namespace

TEST(ContextChunks, LoadBalancedSplit) {
  const ContextChunks c(4, 1, 32);  // 8 chunks of 4: rank 1 holds chunks 1 and 6
  EXPECT_EQ(c.rows(), 8);
  const TokenLayout layout = context_token_layout(c, 3);
  EXPECT_EQ(layout.rows(), 24);
  const std::vector<PositionRun>& runs = layout.sequence_runs();  // rows 0-3 at 4-7, 4-7 at 24-27
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].row, 0); EXPECT_EQ(runs[0].position, 4); EXPECT_EQ(runs[0].count, 4);
  EXPECT_EQ(runs[1].row, 4); EXPECT_EQ(runs[1].position, 24); EXPECT_EQ(runs[1].count, 4);
  const std::vector<int> tokens = {0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 16, 17};
  std::vector<int> mine(8);  // two sequences of 8 in chunks of 2: rank 1 holds chunks 1 and 2
  take_layout_rows(context_token_layout(ContextChunks(2, 1, 8), 2), tokens.data(), mine.data());
  EXPECT_EQ(mine, (std::vector<int>{2, 3, 4, 5, 12, 13, 14, 15}));
  std::vector<int> r0(8);  // rank 0: chunks 0 and 3
  take_layout_rows(context_token_layout(ContextChunks(2, 0, 8), 2), tokens.data(), r0.data());
  EXPECT_EQ(r0, (std::vector<int>{0, 1, 6, 7, 10, 11, 16, 17}));
  // Rows of two values each: the same chunks, whole rows at a time.
  std::vector<int> pairs(4);  // one sequence of 8 rows of 2; rank 1 of 4: chunks 1 and 6 of 8
  take_layout_rows(context_token_layout(ContextChunks(4, 1, 8), 1), tokens.data(), pairs.data(),
                   2);
  EXPECT_EQ(pairs, (std::vector<int>{2, 3, 14, 15}));
  EXPECT_THROW(ContextChunks(3, 0, 16), std::invalid_argument);
}

TEST(RingAttention, EqualsWholeSequenceAttention) {
  auto backend = make_cpu_backend(0);
  const int n = world_size();
  for (int cp : {1, 2, 4}) {
    if (n % cp != 0) continue;
    Grid grid(MPI_COMM_WORLD, GridShape{1, n / cp, 1, cp});
    expect_ring_equals_whole(grid.context(), *backend, 4);
    expect_ring_equals_whole(grid.context(), *backend, 2);  // grouped-query: 2 query heads each
    expect_ring_equals_whole(grid.context(), *backend, 1);  // multi-query
  }
}
