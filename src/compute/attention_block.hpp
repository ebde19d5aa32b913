// One step of ring attention (context parallelism, Liu et al. 2023): a
// rank's queries against one block of keys and values that came around the
// ring. Forward merges the block's attention into the running output and
// log-sum-exp; backward, given the final output and log-sum-exp, adds the
// block's share of the query, key and value gradients (FlashAttention-2's
// recurrence: D = rowsum(dout * out), P = exp(S - lse), dS = P * (dP - D)).
// Blocks that a causal mask hides entirely are never computed: the caller
// skips them.
#pragma once
#include <cstddef>

namespace trident {

// B sequences of rows: element (b, t, c) at data[b * seq + t * row + c].
template <class T>
struct SeqRows {
  T* data = nullptr;
  std::size_t row = 0, seq = 0;
  SeqRows from(int t) const { return {data + std::size_t(t) * row, row, seq}; }
};

template <class T>
struct AttentionBlockOf {
  int batch = 0, queries = 0, keys = 0;  // rows of each sequence
  int width = 0, heads = 0;              // q, k and v each `width` columns of `heads` heads
  // The block on the diagonal: query t sees keys 0..t (the same positions);
  // otherwise every key is visible (all its positions are earlier).
  bool causal = false;
  SeqRows<const T> q, k, v;
  SeqRows<T> out;  // forward: merged into; backward: read
  // lse of (b, h, t) at lse[b * lse_seq + h * lse_head + t]; forward: -inf
  // where nothing is merged yet (out's row then holds zeros).
  T* lse = nullptr;
  std::size_t lse_head = 0, lse_seq = 0;
  AttentionBlockOf from(int query, int key) const {
    AttentionBlockOf b = *this;
    b.q = q.from(query);
    b.out = out.from(query);
    b.lse = lse + query;
    b.k = k.from(key);
    b.v = v.from(key);
    return b;
  }
};

template <class T>
struct AttentionBlockGradsOf {
  SeqRows<const T> dout;     // laid out as out
  SeqRows<T> dq, dk, dv;     // added to; laid out as q, k and v
  AttentionBlockGradsOf from(int query, int key) const {
    return {dout.from(query), dq.from(query), dk.from(key), dv.from(key)};
  }
};

using AttentionBlock = AttentionBlockOf<float>;
using AttentionBlockGrads = AttentionBlockGradsOf<float>;

}  // namespace trident
