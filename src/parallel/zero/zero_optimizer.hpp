// AdamW over this rank's ZeRO shard: the Adam moments exist only for the
// owned slices (1/dp of each unit; persistent units whole), the update runs
// on the owned master parameters, and stages 1-2 then all-gather them. The
// moments and masters live in an OptimizerHome (offload.optimizer): beside
// the model, in host memory or in a swap file, streamed block by block.
#pragma once
#include "optim/adamw.hpp"
#include "offload/optimizer_home.hpp"
#include "optim/grad_view.hpp"
#include "parallel/zero/zero_storage.hpp"

namespace trident {

class ZeroOptimizer {
 public:
  ZeroOptimizer(ZeroStorage& storage, const TensorTable& table, ComputeBackend& backend,
                MemoryLedger& ledger, AdamWConfig cfg, const OffloadSection& offload = {},
                int rank = 0);
  ~ZeroOptimizer() { storage_.on_final_grads(nullptr); }  // the storage may outlive this
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;
  // Sum of squares of the owned gradients. Replicated copies count once: a
  // persistent unit only on data rank 0, a tensor-replicated tensor only where
  // count_tp_replicated (tensor rank 0).
  double grad_sum_squares(bool count_tp_replicated);
  bool grads_nonfinite();  // an inf or NaN in any owned gradient
  // AdamW on the shard with the gradients times grad_scale (applied to f32
  // values: 16-bit gradients are unpacked chunk by chunk), then publish
  // (stages 1-2).
  void step(float lr, float grad_scale);
  // Before the step's passes: the previous step's gradient copies are done
  // (a skipped step leaves them), none counts as taken.
  void begin_step();
  // Unit u's owned gradients changed after backward (the tied copies' sum, a
  // test's poison): a cpu home copies them again at the step.
  void grads_changed(int u);
  // With 16-bit weights: f32 masters of the owned slices, taken from table
  // elements [first, first + n) at `host` (e.g. the initial parameters);
  // step() then writes their rounding to the owned 16-bit slices.
  void init_masters(std::size_t first, const float* host, std::size_t n);
  // The owned weights become the masters' rounding, and stages 1-2 publish them.
  void refresh_weights();
  // The masters' arena when they are resident (null when offloaded or fp32).
  Arena* masters() { return has_masters() ? home_.resident(OptimizerHome::masters) : nullptr; }
  bool has_masters() const { return home_.kinds() == 3; }
  std::int64_t steps_taken() const { return t_; }
  void set_steps_taken(std::int64_t t) { t_ = t; }  // on resume
  OptimizerHome& home() { return home_; }
  const OptimizerHome& home() const { return home_; }

 private:
  // Calls f(tensor, unit, offset in the unit's slice, length) for each
  // tensor's part of an owned slice within shard elements [first, first + count).
  template <class F> void for_owned(std::size_t first, std::size_t count, F&& f);
  // f(unit, a, b) for each unit's part [a, b) of shard elements [lo, hi).
  template <class F> void for_unit_ranges(std::size_t lo, std::size_t hi, F&& f);
  void round_weights(std::size_t first, std::size_t lo, std::size_t hi, const float* master,
                     char* staging, void* block);
  void send_weights(std::size_t first, std::size_t count, const char* staging, void* block);
  char* next_weights_staging();  // cpu home: the staging block the next piece's weights fill
  // cpu home: unit u's owned gradients, final, to their host copy (`now`,
  // or overlapping what is issued next until wait_copies).
  void copy_grads_to_host(int u, bool now);
  // f(g, offset, length) over the host copy of shard elements [first, first + n)
  // as f32 (in place, or widened chunk by chunk).
  template <class F> void host_grad_chunks(std::size_t first, std::size_t n, F&& f);
  char* host_grads(std::size_t element) {
    return static_cast<char*>(home_.host_grads()) +
           (element - home_.offloaded_first()) * dtype_size(storage_.grads_dtype());
  }
  // A block of the home at shard element `first` is updated on the host.
  bool block_on_host(std::size_t first) const {
    return home_.updates_on_host() && first >= home_.offloaded_first();
  }

  ZeroStorage& storage_;
  const TensorTable& table_;
  ComputeBackend& backend_;
  AdamWConfig cfg_;
  OptimizerHome home_;
  GradView view_;  // the owned gradients as f32
  std::int64_t t_ = 0;
  std::vector<bool> on_host_;  // cpu home: unit's gradients copied (or on their way)
  int weights_block_ = 0;      // cpu home: which of the two weights staging blocks is next
};

}  // namespace trident
