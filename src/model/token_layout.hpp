// Which tokens of a micro-batch the model computes and where each sits in its
// sequence. Every sequence contributes the same rows, in the same order: all
// of it on one rank, or a context-parallel rank's chunks of it (two
// load-balanced pieces, parallel/context). The model runs token-local work on
// these rows and looks up positions (a learned table, rotary angles) by the
// runs; attention over the rest of the sequence is its AttentionOp's concern.
// Sequence parallelism then slices the flattened rows over the tensor group
// (TensorParallelLayout::local_tokens).
#pragma once
#include <algorithm>
#include <stdexcept>
#include <vector>

namespace trident {

// Rows [row, row + count) of one sequence's share hold positions
// [position, position + count).
struct PositionRun {
  int row = 0;
  int position = 0;
  int count = 0;
};

class TokenLayout {
 public:
  TokenLayout() = default;
  // Whole sequences of seq_len tokens.
  TokenLayout(int batch, int seq_len) : TokenLayout(batch, seq_len, {{0, 0, seq_len}}) {}
  // Each sequence's share as runs in row order, covering rows 0.. without gaps.
  TokenLayout(int batch, int seq_len, std::vector<PositionRun> sequence_runs)
      : batch_(batch), seq_len_(seq_len), runs_(std::move(sequence_runs)) {
    for (const PositionRun& r : runs_) {
      if (r.row != rows_per_sequence_ || r.count < 1 || r.position < 0 ||
          r.position + r.count > seq_len)
        throw std::invalid_argument("TokenLayout: runs must tile the rows within the sequence");
      rows_per_sequence_ += r.count;
    }
  }

  bool empty() const { return batch_ == 0; }
  int batch() const { return batch_; }
  int seq_len() const { return seq_len_; }  // the whole sequence's (the position table's size)
  int rows_per_sequence() const { return rows_per_sequence_; }
  int rows() const { return batch_ * rows_per_sequence_; }  // of the micro-batch
  // Every sequence whole and in order: row r is position r % seq_len.
  bool whole_sequences() const { return runs_.size() == 1 && rows_per_sequence_ == seq_len_; }
  const std::vector<PositionRun>& sequence_runs() const { return runs_; }

  // The runs of flattened rows [first, first + count) (a sequence-parallel
  // slice may start and end anywhere), rows counted from `first`.
  std::vector<PositionRun> runs_of_rows(int first, int count) const {
    std::vector<PositionRun> out;
    const int end = first + count;
    for (int s = first / rows_per_sequence_; s * rows_per_sequence_ < end; ++s)
      for (const PositionRun& r : runs_) {
        const int lo = std::max(first, s * rows_per_sequence_ + r.row);
        const int hi = std::min(end, s * rows_per_sequence_ + r.row + r.count);
        if (lo < hi)
          out.push_back({lo - first, r.position + lo - (s * rows_per_sequence_ + r.row), hi - lo});
      }
    return out;
  }

 private:
  int batch_ = 0, seq_len_ = 0, rows_per_sequence_ = 0;
  std::vector<PositionRun> runs_;
};

}  // namespace trident
