// ZeRO's storage of parameters and gradients (the model reads and writes
// through it), by stage:
//   1: full parameters, full gradients; at the end of backward each unit's
//      gradients are reduce-scattered into this rank's slice;
//   2: gradients exist only in a few unit-sized slots: a unit's slot is
//      reduce-scattered the moment backward leaves it and then recycled;
//   3: as 2, and parameters exist only as this rank's slices: a unit is
//      all-gathered into a slot just before it is used (the next one is
//      prefetched) and the slot is freed when the model is done with it.
// Persistent (small) units are whole everywhere and all-reduced.
// With 16-bit weights the resident parameters (full or slices) are bf16/fp16,
// stage 3 gathers 16-bit units, and a unit in use is unpacked into an f32
// working copy (WorkingCopies; at stages 1-2 a table that is one unit is read
// block by block through a window instead). A 16-bit precision.reduce_dtype reduces
// gradients in 16 bits (stage 1 also stores its full gradients so, with f32
// working copies like the weights'). The owned, summed slices are model state
// in the gradients' type (2 bytes with a 16-bit reduce_dtype, as the ZeRO
// paper counts them): stage 1 keeps them in place, in its full gradients;
// stages 2-3 widen each micro-batch's sum and the slice chunk by chunk to add
// them. Gather slots, gradient slots and receive buffers are working buffers.
// With offload.params (stage 3) the partitioned units' slices live in a
// ParamHome (host memory or a swap file): a slice is staged from there before
// its gather, the next one's read starting one unit ahead, and the optimizer
// updates the slices through the home (update_owned_params). Persistent units
// stay in the arenas.
#pragma once
#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <memory>
#include <vector>

#include "io/deck.hpp"
#include "memory/working_copies.hpp"
#include "model/model_storage.hpp"
#include "offload/param_home.hpp"
#include "parallel/zero/zero_comm.hpp"
#include "parallel/zero/zero_plan.hpp"

namespace trident {

class ZeroStorage final : public ModelStorage {
 public:
  // Fixed pools, allocated up front so memory is known before the run (the
  // estimator counts exactly these). One slot of each pool is large enough for
  // the token embedding (the biggest unit: vocab x d_model), the rest fit any
  // other unit. Parameters: 2 slots (the unit in use and the prefetched one; at
  // the embeddings or the tied head, the table and its small partner).
  // Gradients: 3 slots (the token embedding's, collecting at both ends of
  // backward, and two that alternate between being written and being
  // reduced). Two receive buffers, none at dp 1: a reduction over one rank is
  // its input, read where it is.
  static constexpr int kParamSlots = 2, kGradSlots = 3, kRecvBuffers = 2;
  static int recv_buffers(int dp) { return dp > 1 ? kRecvBuffers : 0; }
  static std::size_t large_slot_elements(const ZeroPlan& plan);  // any unit
  static std::size_t small_slot_elements(const ZeroPlan& plan);  // any unit but the token embedding
  // Stage 3's parameter slots: kParamSlots, and one more on the tied head's
  // chunk when both its units are partitioned f32: the head keeps the
  // embedding and the final norm gathered from its forward to its backward,
  // while a schedule may run the next micro-batches' blocks first (gpipe).
  static int param_slots(const TensorTable& table, const ZeroPlan& plan, DType weights);

  ZeroStorage(int stage, const TensorTable& table, const ZeroPlan& plan, ComputeBackend& backend,
              MemoryLedger& ledger, Communicator& data, DType weights = DType::f32,
              DType grads = DType::f32, const OffloadSection& offload = {}, int rank = 0);
  // Elements of the parameter shard that stay in the arenas: all of it, or
  // with offload.params only the persistent units' slices.
  static std::size_t resident_param_elements(const ZeroPlan& plan, bool offloaded);
  // The sizes of offloaded staging: the largest partitioned slice, and the
  // largest that is not the token embedding's (elements).
  static std::pair<std::size_t, std::size_t> staging_slices(const ZeroPlan& plan);
  bool params_offloaded() const { return home_ != nullptr; }
  std::size_t host_bytes() const { return home_ ? home_->host_bytes() : 0; }  // offload.params = cpu
  std::string warning() const { return home_ ? home_->warning() : std::string(); }
  DType param_dtype() const { return weights_; }
  int stage() const { return stage_; }
  const ZeroPlan& plan() const { return plan_; }

  float* param(const TensorInfo& t) override { return param_at(t, 0); }
  float* grad(const TensorInfo& t) override { return grad_at(t, 0); }
  float* param_at(const TensorInfo& t, std::size_t element) override;
  // Stages 1-2 hold the 16-bit weights whole; stage 3's are gathered per unit.
  const std::uint16_t* param_bf16(const TensorInfo& t) override;
  void read_as_bits(const TensorInfo& t) override;
  float* grad_at(const TensorInfo& t, std::size_t element) override;
  bool table_in_windows() const override { return table_unit_ >= 0; }
  bool table_grads_in_windows() const override { return grad_table_unit_ >= 0; }
  const std::uint16_t* table_bf16(const TensorInfo& t) override;
  const float* param_rows(const TensorInfo& t, std::size_t element, std::size_t n) override;
  float* grad_rows(const TensorInfo& t, std::size_t element, std::size_t n) override;
  void done_grad_rows(const TensorInfo& t, std::size_t element, std::size_t n) override;
  // Stages 1-2 with 16-bit weights read a table that is one unit through a
  // window; stage 1 adds to its 16-bit gradients the same way.
  static bool windows_table(const TensorTable& table, int stage, DType weights) {
    return stage <= 2 && weights != DType::f32 && WorkingCopies::can_window_table(table);
  }
  static bool windows_table_grads(const TensorTable& table, int stage, DType grads) {
    return stage <= 1 && grads != DType::f32 && WorkingCopies::can_window_table(table);
  }
  void need_params(int unit, Pass pass) override;
  void done_params(int unit) override;
  void need_grads(int unit) override;
  void done_grads(int unit, bool last) override;
  bool grads_leave_each_backward() const override { return stage_ >= 2; }
  void gather_params_to_host(std::vector<float>& out) override;
  void set_params_from_host(std::size_t first, const float* in, std::size_t n) override;

  void begin_step();       // zero the owned gradients (and stage 1's full ones)
  void finish_backward();  // complete every outstanding reduction
  // f(u) runs once unit u's owned gradients hold the step's sum (its
  // reduction from the step's last backward complete), while backward goes on.
  void on_final_grads(std::function<void(int)> f) { final_grads_ = std::move(f); }
  // This rank's slice of unit u: its parameters (of param_dtype()) and its
  // summed gradients (of grads_dtype()). Offloaded slices have no address:
  // update_owned_params and the params window reach them.
  void* owned_params(int u);
  // f(first', count', block) for pieces covering shard elements [first,
  // first + count) of the parameters; what f writes is kept. owned_param_at
  // finds unit u's element `offset` of its slice within a piece.
  using OwnedParamsFn = std::function<void(std::size_t, std::size_t, void*)>;
  void update_owned_params(std::size_t first, std::size_t count, const OwnedParamsFn& f);
  void* owned_param_at(int u, std::size_t offset, std::size_t block_first, void* block);
  // The whole parameter shard in backend memory, in the shard's layout, while
  // a checkpoint reads or writes it (null: owned_params reaches every slice);
  // close(changed) stores what a load wrote.
  char* open_params_window();
  void close_params_window(bool changed);
  // An asynchronous checkpoint's stand-in for the window: shard elements
  // [first, first + count) to host memory from the drain's thread while the
  // passes go on, persistent slices from the arenas and the rest through the
  // home (ParamHome::read_beside_gathers). Valid until the optimizer step.
  void read_params_beside_passes(std::size_t first, std::size_t count, void* out);
  DType grads_dtype() const { return grads_; }
  // Stage 1 sums each slice in place, in the full gradients (no second
  // copy); stages 2-3 keep the slices as a shard of their own. Unit u's slice
  // starts at element owned_grads_first(u) of owned_grads_arena().
  Arena& owned_grads_arena() { return grads_in_place() ? g_full_ : g_shard_; }
  std::size_t owned_grads_first(int u) const {
    const ZeroUnit& U = plan_.units()[u];
    return grads_in_place() ? plan_.slice_begin(U) : U.shard_offset;
  }
  void* owned_grads(int u) { return grad_bytes(owned_grads_arena(), owned_grads_first(u)); }
  // Calls f(arena, first element, length) for each unit's slice.
  template <class F> void for_each_owned_grads(F&& f) {
    if (!grads_in_place()) return f(g_shard_, std::size_t(0), plan_.shard_size());
    for (std::size_t u = 0; u < plan_.units().size(); ++u)
      f(g_full_, owned_grads_first(int(u)), plan_.slice(plan_.units()[u]));
  }
  // Stages 2-3 with 16-bit gradients: the f32 chunk in which a micro-batch's
  // sum is added to the owned slice (elements).
  static std::size_t accumulate_chunk_elements(const ZeroPlan& plan, int stage, DType grads);
  // Stages 1-2: every parameter, in the table's layout (null at stage 3).
  void* full_params() { return stage_ <= 2 ? p_full_.data() : nullptr; }
  void publish_params();  // stages 1-2: all-gather the updated slices

 private:
  struct Slot {
    Arena mem;
    Arena bits;  // gradient slots with a 16-bit reduce_dtype: what is reduced
    int unit = -1;
    int users = 0;
    Request pending;  // a gather in flight into this slot
    bool staged = false;  // the gather reads the home's staging
  };
  struct Reduction {
    int unit;
    Slot* slot;     // stages 2-3: the gradient slot to recycle afterwards
    void* recv;     // where the summed slice lands before it is accumulated
    Request req;
    bool last;      // from the step's last backward: the slice is then final
  };
  Slot* find(std::vector<std::unique_ptr<Slot>>& pool, int unit);
  Slot* acquire(std::vector<std::unique_ptr<Slot>>& pool, int unit, bool may_fail = false);
  void start_gather(int unit, bool prefetch);
  void finish_gather(Slot& s);  // waits; frees its staging
  const void* offloaded_slice(int unit, bool may_fail);
  int next_in_pass(int unit, Pass pass) const;  // -1: none prefetched
  void prefetch_after(int unit, Pass pass);
  char* resident_slice(int unit) {  // a slice kept in the arenas
    return param_bytes(p_shard_, home_ ? resident_at_[std::size_t(unit)]
                                       : plan_.units()[std::size_t(unit)].shard_offset);
  }
  void need_working_copy(int unit);  // 16-bit weights
  bool sixteen() const { return weights_ != DType::f32; }
  // Where unit u's resident parameters (or this rank's slice of them) start.
  char* param_bytes(Arena& a, std::size_t element) {
    return static_cast<char*>(a.data()) + element * dtype_size(weights_);
  }
  void complete_oldest_reduction();
  void complete_finished_reductions();
  void sum_into_owned(const Reduction& r);
  void* free_recv_buffer();
  void* recv_buffer(void* full);  // where a unit's summed slice lands
  bool sixteen_grads() const { return grads_ != DType::f32; }
  bool grads_in_place() const { return stage_ == 1; }
  void accumulate(void* owned, const float* summed, std::size_t n);  // into 16-bit slices
  void* grad_bytes(Arena& a, std::size_t element) {
    return static_cast<char*>(a.data()) + element * dtype_size(a.dtype());
  }

  int stage_;
  DType weights_, grads_;
  const TensorTable& table_;
  const ZeroPlan& plan_;
  ComputeBackend& backend_;
  MemoryLedger& ledger_;
  ZeroComm comm_;
  std::size_t large_slot_, small_slot_;
  Arena p_full_, g_full_, p_shard_, g_shard_;
  std::vector<std::unique_ptr<Slot>> p_slots_, g_slots_;
  std::vector<Arena> recv_buffers_;
  Arena accumulate_chunk_;      // stages 2-3 with 16-bit gradients
  WorkingCopies working_;       // 16-bit weights only
  int table_unit_ = -1;         // the token embedding, read through working_'s window
  int grad_table_unit_ = -1;    // its gradients, through grad_working_'s
  WorkingCopies grad_working_;  // stage 1 with 16-bit gradients only
  std::deque<Reduction> reductions_;
  std::function<void(int)> final_grads_;
  std::unique_ptr<ParamHome> home_;       // offload.params
  std::vector<std::size_t> resident_at_;  // offloaded: persistent slices' place in p_shard_
  MemoryLedger window_ledger_;            // transient: host transfers and checkpoint windows
  Arena window_;
};

}  // namespace trident
