// Which tokens of each sequence a context rank holds: Megatron-Core's causal
// load balance cuts a sequence of T tokens into 2·cp chunks and gives rank i
// chunks i and 2·cp−1−i, so every rank has as many query-key pairs below the
// causal diagonal as the others. A rank's rows of one sequence are its first
// chunk, then its second. No MPI: the deck, the trainer and tests read it.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/token_layout.hpp"

namespace trident {

struct ContextChunks {
  int cp = 1, rank = 0, seq_len = 0;

  ContextChunks(int cp_, int rank_, int seq_len_) : cp(cp_), rank(rank_), seq_len(seq_len_) {
    if (cp < 1 || rank < 0 || rank >= cp || seq_len % (2 * cp) != 0)
      throw std::invalid_argument("context chunks: seq_len " + std::to_string(seq_len) +
                                  " in 2 * cp = " + std::to_string(2 * cp) +
                                  " equal chunks, rank " + std::to_string(rank));
  }
  int chunk() const { return seq_len / (2 * cp); }  // tokens per chunk
  int rows() const { return 2 * chunk(); }          // this rank's tokens of each sequence
  int first() const { return rank; }                // chunk indices
  int second() const { return 2 * cp - 1 - rank; }
  // The position in its sequence of this rank's row `r`.
  int position(int r) const {
    const int c = chunk();
    return r < c ? first() * c + r : second() * c + (r - c);
  }
};

// The model's rows for a micro-batch of `batch` sequences: the two chunks.
inline TokenLayout context_token_layout(const ContextChunks& c, int batch) {
  const int n = c.chunk();
  return TokenLayout(batch, c.seq_len, {{0, c.first() * n, n}, {n, c.second() * n, n}});
}

// This rank's rows of `batch` sequences of seq_len values each (tokens or
// targets), in row order: batch x rows() values into `mine`.
template <class T>
void take_context_rows(const ContextChunks& c, const T* all, T* mine, int batch) {
  const int n = c.chunk();
  for (int b = 0; b < batch; ++b) {
    const T* seq = all + std::size_t(b) * c.seq_len;
    T* out = mine + std::size_t(b) * c.rows();
    for (int i = 0; i < n; ++i) out[i] = seq[c.first() * n + i];
    for (int i = 0; i < n; ++i) out[n + i] = seq[c.second() * n + i];
  }
}

}  // namespace trident
