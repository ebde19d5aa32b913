// Ring attention (Liu et al. 2023) as the model's AttentionOp: each rank of a
// context group holds its two load-balanced chunks of every sequence
// (context_split.hpp); keys and values travel once around the group while
// each block is computed against the local queries (the next block's
// transfer in flight), and the partial outputs merge exactly by log-sum-exp.
// Backward passes the key/value gradients around behind the blocks, so each
// comes home summed over every rank's queries. Causally hidden blocks are
// skipped: with the load balance every rank computes the same number of
// products at every step.
#pragma once
#include <cstdint>
#include <vector>

#include "compute/bf16_operands.hpp"
#include "memory/arena.hpp"
#include "model/attention_op.hpp"
#include "parallel/context/context_comm.hpp"
#include "parallel/context/context_split.hpp"

namespace trident {

// Seconds on the host: the blocks' kernels, and waits for the ring's
// transfers after them (the part of the communication not hidden behind
// attention). A device backend's kernels run asynchronously: there the
// compute time is what enqueuing took.
struct RingTimes {
  double compute = 0, exposed = 0;
};

class RingAttention final : public AttentionOp {
 public:
  // `ring`: the context group (grid.context()); seq_len: whole sequences'.
  // The ring's buffers are charged to the ledger's buffers when first used.
  RingAttention(ComputeBackend& backend, MemoryLedger& ledger, Communicator& ring, int seq_len);
  RingAttention(const RingAttention&) = delete;
  RingAttention& operator=(const RingAttention&) = delete;

  const ContextChunks& chunks() const { return chunks_; }
  const RingTimes& times() const { return times_; }
  // s.seq_len: this rank's rows of each sequence (chunks().rows()). bf16:
  // q, k and v hold bf16 values; the products run in f32.
  void forward(float* out, float* lse, MatrixIn qkv, const AttentionShape& s, bool bf16) override;
  void backward(float* dqkv, MatrixIn dout, MatrixIn qkv, const float* out, const float* lse,
                const AttentionShape& s, bool bf16) override;
  void forward_rounded(float* out, std::uint16_t* bits, float* lse, MatrixIn qkv,
                       const AttentionShape& s) override;
  void backward_rounded(float* dqkv, std::uint16_t* bits, MatrixIn dout, MatrixIn qkv,
                        const float* out, const float* lse, const AttentionShape& s) override;

  // Floats of the ring's buffers for a micro-batch of `batch` sequences,
  // keys and values `kv_width` features each per tensor rank: two key/value
  // blocks travelling in forward, two more blocks of their gradients plus
  // one arriving in backward (what the memory estimate counts); and
  // `widened_width` f32 values per row where q, k and v come as bf16 bits
  // alone (a bf16 run on bf16 kernels: the qkv width).
  static std::size_t buffer_floats(int batch, int rows, int kv_width, int widened_width = 0);

 private:
  float* buffer(Arena& b, std::size_t floats);
  const float* qkv_values(MatrixIn qkv, std::size_t n);
  void check(const AttentionShape& s) const;
  // Features of k (and of v) per row, and of a row of qkv.
  static std::size_t kv_width(const AttentionShape& s) {
    return std::size_t(s.kv_heads > 0 ? s.kv_heads : s.heads) * s.head_size();
  }
  static std::size_t qkv_row(const AttentionShape& s) { return s.width + 2 * kv_width(s); }
  template <class Run>
  void each_head(const AttentionShape& s, const AttentionBlock& b, const AttentionBlockGrads* g,
                 Run&& run) const;
  void finish(ContextComm::Shift& shift);  // waits, timed as exposed
  AttentionBlock block(const AttentionShape& s, const float* q, const float* kv, float* out,
                       float* lse) const;
  // The blocks of block `j`'s keys and values that this rank's queries see,
  // as fn(query row, key row, queries, keys, causal) of one sequence's rows.
  template <class Fn>
  void each_visible(int j, Fn&& fn) const;
  void add_key_value_grads(float* dqkv, const float* dkv, const AttentionShape& s);

  ComputeBackend& backend_;
  MemoryLedger& ledger_;
  Bf16OperandsFor bf16_ops_;
  ContextComm ring_;
  ContextChunks chunks_;
  std::vector<TokenLayout> layouts_;  // each ring rank's positions of one sequence
  Arena kv_[2], dkv_[2], dkv_in_, values_;
  std::vector<float> minus_inf_;  // host: lse's starting value
  RingTimes times_;
};

}  // namespace trident
