// Which tokens of each sequence a context rank holds: Megatron-Core's causal
// load balance cuts a sequence of T tokens into 2·cp chunks and gives rank i
// chunks i and 2·cp−1−i, so every rank has as many query-key pairs below the
// causal diagonal as the others. A rank's rows of one sequence are its first
// chunk, then its second: context_token_layout's runs say so, and everything
// else (the rows taken from a micro-batch) reads them. No MPI: the deck, the
// trainer and tests read it.
#pragma once
#include <algorithm>
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
};

// The model's rows for a micro-batch of `batch` sequences: the two chunks, as
// runs of positions. The one place a rank's rows map to positions.
inline TokenLayout context_token_layout(const ContextChunks& c, int batch) {
  const int n = c.chunk();
  return TokenLayout(batch, c.seq_len, {{0, c.first() * n, n}, {n, c.second() * n, n}});
}

// The rows `layout` holds of its batch() sequences of seq_len() rows, `width`
// values a row (tokens or targets: 1), in row order: batch() x
// rows_per_sequence() rows into `mine`.
template <class T>
void take_layout_rows(const TokenLayout& layout, const T* all, T* mine, std::size_t width = 1) {
  const std::size_t whole = std::size_t(layout.seq_len()) * width;
  const std::size_t share = std::size_t(layout.rows_per_sequence()) * width;
  for (int b = 0; b < layout.batch(); ++b)
    for (const PositionRun& run : layout.sequence_runs())
      std::copy_n(all + b * whole + std::size_t(run.position) * width, run.count * width,
                  mine + b * share + std::size_t(run.row) * width);
}

}  // namespace trident
