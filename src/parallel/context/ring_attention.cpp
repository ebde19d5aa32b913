#include "parallel/context/ring_attention.hpp"

#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/timer.hpp"

namespace trident {

RingAttention::RingAttention(ComputeBackend& backend, MemoryLedger& ledger, Communicator& ring,
                             int seq_len)
    : backend_(backend),
      ledger_(ledger),
      bf16_ops_(backend),
      ring_(ring),
      chunks_(ring.size(), ring.rank(), seq_len) {
  for (int j = 0; j < ring.size(); ++j)
    layouts_.push_back(context_token_layout(ContextChunks(ring.size(), j, seq_len), 1));
}

std::size_t RingAttention::buffer_floats(int batch, int rows, int kv_width, int widened_width) {
  return std::size_t(batch) * rows * (10 * std::size_t(kv_width) + widened_width);
}

float* RingAttention::buffer(Arena& b, std::size_t floats) {
  if (b.numel() < floats) b = Arena(backend_, ledger_, MemCategory::buffers, floats);
  return b.f32();
}

// q, k and v as f32 values: given, or widened from the bf16 bits a backend
// with bf16 kernels may hand over alone.
const float* RingAttention::qkv_values(MatrixIn qkv, std::size_t n) {
  if (qkv.values) return qkv.values;
  float* v = buffer(values_, n);
  backend_.convert(v, DType::f32, qkv.bf16, DType::bf16, n);
  return v;
}

void RingAttention::finish(ContextComm::Shift& shift) {
  ScopedTimer wait(times_.exposed);
  ring_.finish(shift);
}

void RingAttention::check(const AttentionShape& s) const {
  if (s.seq_len != chunks_.rows() || s.width % s.heads != 0)
    throw std::logic_error("ring attention: " + std::to_string(s.seq_len) +
                           " rows per sequence, but this context rank holds " +
                           std::to_string(chunks_.rows()));
}

AttentionBlock RingAttention::block(const AttentionShape& s, const float* q, const float* kv,
                                    float* out, float* lse) const {
  const std::size_t T = s.seq_len, C = s.width, row = qkv_row(s), kvw = kv_width(s);
  AttentionBlock b;
  b.batch = s.batch, b.width = s.width, b.heads = s.heads;
  b.q = {q, row, T * row};
  b.k = {kv, 2 * kvw, T * 2 * kvw};
  b.v = {kv + kvw, 2 * kvw, T * 2 * kvw};
  b.out = {out, C, T * C};
  b.lse = lse, b.lse_head = T, b.lse_seq = T * s.heads;
  return b;
}

// Grouped-query attention: one head at a time, query head h against key/value
// head h / group, so the heads sharing a key/value head add their dK and dV
// in head order (the kernels take as many key/value heads as query heads).
template <class Run>
void RingAttention::each_head(const AttentionShape& s, const AttentionBlock& b,
                              const AttentionBlockGrads* g, Run&& run) const {
  if (!s.grouped()) return run(b, g);
  const int hs = s.head_size(), group = s.heads / s.kv_heads;
  for (int h = 0; h < s.heads; ++h) {
    const std::size_t qc = std::size_t(h) * hs, kc = std::size_t(h / group) * hs;
    AttentionBlock one = b;
    one.heads = 1, one.width = hs;
    one.q.data += qc, one.out.data += qc, one.lse += h * b.lse_head;
    one.k.data += kc, one.v.data += kc;
    if (!g) {
      run(one, nullptr);
      continue;
    }
    AttentionBlockGrads gh = *g;
    gh.dout.data += qc, gh.dq.data += qc, gh.dk.data += kc, gh.dv.data += kc;
    run(one, &gh);
  }
}

namespace {

// One block call: query rows [q, q + nq) against key rows [k, k + nk).
struct VisibleBlock {
  int q = 0, k = 0, nq = 0, nk = 0;
  bool causal = false;
};

// What query run `q` sees of `keys`' rows, in key-row order: a run wholly
// before it in full (row-adjacent ones in one call, as one softmax pass), the
// run at its own positions causally; a run after it not at all.
std::vector<VisibleBlock> visible_keys(const PositionRun& q, const TokenLayout& keys) {
  std::vector<VisibleBlock> out;
  for (const PositionRun& k : keys.sequence_runs()) {
    if (k.position + k.count <= q.position) {
      if (!out.empty() && !out.back().causal && out.back().k + out.back().nk == k.row)
        out.back().nk += k.count;
      else
        out.push_back({q.row, k.row, q.count, k.count, false});
    } else if (k.position == q.position && k.count == q.count) {
      out.push_back({q.row, k.row, q.count, k.count, true});
    } else if (k.position < q.position + q.count) {
      throw std::logic_error("ring attention: a key run straddles a query run's positions");
    }
  }
  return out;
}

// Row-adjacent query runs that see the same keys in full are one call, so
// each key's gradient sums over those queries in one pass.
bool join_queries(std::vector<VisibleBlock>& calls, const std::vector<VisibleBlock>& next) {
  if (calls.empty() || calls.size() != next.size()) return false;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const VisibleBlock &a = calls[i], &b = next[i];
    if (a.causal || b.causal || a.k != b.k || a.nk != b.nk || a.q + a.nq != b.q) return false;
  }
  for (std::size_t i = 0; i < calls.size(); ++i) calls[i].nq += next[i].nq;
  return true;
}

}  // namespace

// The positions come from each rank's TokenLayout (context_token_layout):
// with the load balance, rank r's first chunk sees an earlier rank's first
// chunk, its second chunk sees a later rank's both and its own first, and
// each chunk sees itself causally.
template <class Fn>
void RingAttention::each_visible(int j, Fn&& fn) const {
  std::vector<VisibleBlock> calls;
  auto flush = [&] {
    for (const VisibleBlock& b : calls) fn(b.q, b.k, b.nq, b.nk, b.causal);
  };
  for (const PositionRun& q : layouts_[chunks_.rank].sequence_runs()) {
    const std::vector<VisibleBlock> seen = visible_keys(q, layouts_[j]);
    if (join_queries(calls, seen)) continue;
    flush();
    calls = seen;
  }
  flush();
}

void RingAttention::forward(float* out, float* lse, MatrixIn qkv, const AttentionShape& s,
                            bool) {
  check(s);
  const std::size_t rows = std::size_t(s.batch) * s.seq_len, C = s.width;
  const std::size_t row = qkv_row(s), n = rows * 2 * kv_width(s);
  const float* q = qkv_values(qkv, s.qkv_elements());
  const int cp = ring_.size(), r = ring_.rank();
  float* kv = buffer(kv_[0], n);
  float* next = cp > 1 ? buffer(kv_[1], n) : nullptr;
  backend_.copy_2d(kv, 2 * kv_width(s), q + C, row, rows, 2 * kv_width(s));
  backend_.zero(out, rows * C * sizeof(float));
  minus_inf_.assign(std::size_t(s.batch) * s.heads * s.seq_len,
                    -std::numeric_limits<float>::infinity());
  backend_.copy_from_host(lse, minus_inf_.data(), minus_inf_.size() * sizeof(float));
  for (int step = 0; step < cp; ++step) {
    ContextComm::Shift shift;
    if (step + 1 < cp) shift = ring_.start_shift(kv, next, n, ContextComm::kKeysValues);
    const AttentionBlock whole = block(s, q, kv, out, lse);
    {
      ScopedTimer compute(times_.compute);
      each_visible((r - step + cp) % cp,
                   [&](int qi, int ki, int nq, int nk, bool causal) {
                     AttentionBlock b = whole.from(qi, ki);
                     b.queries = nq, b.keys = nk, b.causal = causal;
                     each_head(s, b, nullptr, [&](const AttentionBlock& one,
                                                  const AttentionBlockGrads*) {
                       backend_.attention_block_forward(one);
                     });
                   });
    }
    if (step + 1 < cp) {
      finish(shift);
      std::swap(kv, next);
    }
  }
}

// Block j's key/value gradients follow its keys around the ring, one step
// behind: each rank adds its queries' share to what the previous ranks
// summed, and after cp steps the sum reaches j. The share is computed into a
// fresh buffer while the sum so far is still arriving, then the two are added.
void RingAttention::backward(float* dqkv, MatrixIn dout, MatrixIn qkv, const float* out,
                             const float* lse, const AttentionShape& s, bool) {
  check(s);
  const std::size_t rows = std::size_t(s.batch) * s.seq_len, C = s.width, kvw = kv_width(s);
  const std::size_t row = qkv_row(s), n = rows * 2 * kvw;
  const float* q = qkv_values(qkv, s.qkv_elements());
  const int cp = ring_.size(), r = ring_.rank();
  float* kv = buffer(kv_[0], n);
  float* next = cp > 1 ? buffer(kv_[1], n) : nullptr;
  float* share[2] = {buffer(dkv_[0], n), cp > 1 ? buffer(dkv_[1], n) : nullptr};
  float* arriving = cp > 1 ? buffer(dkv_in_, n) : nullptr;
  backend_.copy_2d(kv, 2 * kvw, q + C, row, rows, 2 * kvw);
  const std::size_t T = s.seq_len;
  AttentionBlockGrads grads{{dout.values, C, T * C}, {dqkv, row, T * row}, {}, {}};
  ContextComm::Shift grads_in_flight;
  for (int step = 0; step < cp; ++step) {
    ContextComm::Shift shift;
    if (step + 1 < cp) shift = ring_.start_shift(kv, next, n, ContextComm::kKeysValues);
    float* mine = share[step % 2];
    backend_.zero(mine, n * sizeof(float));
    grads.dk = {mine, 2 * kvw, T * 2 * kvw};
    grads.dv = {mine + kvw, 2 * kvw, T * 2 * kvw};
    const AttentionBlock whole = block(s, q, kv, const_cast<float*>(out),
                                       const_cast<float*>(lse));
    {
      ScopedTimer compute(times_.compute);
      each_visible((r - step + cp) % cp,
                   [&](int qi, int ki, int nq, int nk, bool causal) {
                     AttentionBlock b = whole.from(qi, ki);
                     b.queries = nq, b.keys = nk, b.causal = causal;
                     const AttentionBlockGrads g = grads.from(qi, ki);
                     each_head(s, b, &g, [&](const AttentionBlock& one,
                                             const AttentionBlockGrads* gh) {
                       backend_.attention_block_backward(one, *gh);
                     });
                   });
    }
    if (step > 0) {  // the sum of the ranks before this one
      finish(grads_in_flight);
      backend_.add(mine, mine, arriving, n);
    }
    if (cp > 1)
      grads_in_flight = ring_.start_shift(mine, arriving, n, ContextComm::kKeyValueGrads);
    if (step + 1 < cp) {
      finish(shift);
      std::swap(kv, next);
    }
  }
  const float* own = share[0];
  if (cp > 1) {
    finish(grads_in_flight);
    own = arriving;
  }
  add_key_value_grads(dqkv, own, s);
}

// dqkv's k and v columns += dkv (rows of 2 kv_width): through a contiguous
// copy, the backend having no strided add.
void RingAttention::add_key_value_grads(float* dqkv, const float* dkv, const AttentionShape& s) {
  const std::size_t rows = std::size_t(s.batch) * s.seq_len, C = s.width, row = qkv_row(s);
  const std::size_t kv = 2 * kv_width(s);
  float* tmp = buffer(kv_[1], rows * kv);
  backend_.copy_2d(tmp, kv, dqkv + C, row, rows, kv);
  backend_.add(tmp, tmp, dkv, rows * kv);
  backend_.copy_2d(dqkv + C, row, tmp, kv, rows, kv);
}

void RingAttention::forward_rounded(float* out, std::uint16_t* bits, float* lse, MatrixIn qkv,
                                    const AttentionShape& s) {
  forward(out, lse, qkv, s, true);
  bf16_ops_->round_to_bf16(out, bits, out, std::size_t(s.batch) * s.seq_len * s.width);
}

void RingAttention::backward_rounded(float* dqkv, std::uint16_t* bits, MatrixIn dout,
                                     MatrixIn qkv, const float* out, const float* lse,
                                     const AttentionShape& s) {
  const std::size_t n = s.qkv_elements();
  backend_.zero(dqkv, n * sizeof(float));
  backward(dqkv, dout, qkv, out, lse, s, true);
  bf16_ops_->round_to_bf16(dqkv, bits, dqkv, n);
}

}  // namespace trident
