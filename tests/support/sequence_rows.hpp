// A rank's rows of split sequences and the whole sequences they belong to,
// placed by a TokenLayout's runs (model/token_layout.hpp): tests that split
// every sequence over ranks assemble the whole sequences from the ranks'
// rows and take each rank's rows back out. Rank-side buffers hold
// `sequences` x rows_per_sequence() rows, whole ones `sequences` x seq_len(),
// `width` values a row: activations (batch, rows, width) are batch
// sequences; a log-sum-exp (batch, heads, rows) is batch x heads sequences of
// width 1.
#pragma once
#include <algorithm>
#include <cstddef>

#include "model/token_layout.hpp"

namespace trident::testing {

// Calls f(offset of a run in the rank's buffer, offset in the whole one,
// values in the run) for each run of each sequence.
template <class F>
void for_each_run(const TokenLayout& t, int sequences, int width, F&& f) {
  for (int s = 0; s < sequences; ++s)
    for (const PositionRun& r : t.sequence_runs())
      f((std::size_t(s) * t.rows_per_sequence() + r.row) * width,
        (std::size_t(s) * t.seq_len() + r.position) * width, std::size_t(r.count) * width);
}

// The rank's rows `mine` into their positions of `whole`.
template <class T>
void place_rows(const TokenLayout& t, int sequences, int width, const T* mine, T* whole) {
  for_each_run(t, sequences, width, [&](std::size_t at_mine, std::size_t at_whole, std::size_t n) {
    std::copy_n(mine + at_mine, n, whole + at_whole);
  });
}

// The rank's rows of `whole` into `mine`.
template <class T>
void take_rows(const TokenLayout& t, int sequences, int width, const T* whole, T* mine) {
  for_each_run(t, sequences, width, [&](std::size_t at_mine, std::size_t at_whole, std::size_t n) {
    std::copy_n(whole + at_whole, n, mine + at_mine);
  });
}

}  // namespace trident::testing
