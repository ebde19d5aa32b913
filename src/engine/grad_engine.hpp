// How one model chunk's gradients are synchronised over the data group and
// where its optimizer state lives: plain data parallelism (all-reduce or
// gather-to-root) or ZeRO 1-3. The schedules and the trainer hold one engine
// per chunk and call only this interface; make_grad_engine() is the one place
// that chooses an implementation.
//
// A step, per chunk: begin_step(); the model's backward passes (the last one
// with grads_ready_hook(), so buckets reduce while backward runs);
// finish_backward(); sum_tied_grads() where the chunk holds a tied copy;
// grad_sum_squares() into the global norm (optim/clip.hpp); step().
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "grid/grid.hpp"
#include "io/deck_sections.hpp"
#include "checkpoint/tensor_slice.hpp"
#include "memory/arena.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"

namespace trident {

// Gradients an engine holds for one tensor: where, how many, in which type.
struct GradSpan {
  void* data = nullptr;  // null: this rank holds none (gather mode off the root)
  std::size_t count = 0;
  DType dtype = DType::f32;
};

// The kinds of training state a checkpoint holds per parameter.
enum class StateKind { params, exp_avg, exp_avg_sq, masters };

class GradEngine {
 public:
  virtual ~GradEngine() = default;

  // Where the model keeps parameters and gradients: null for the model's own
  // full arenas, else a sharded storage the model must be built on.
  virtual ModelStorage* storage() = 0;
  // Once the model exists: optimizer state, and with 16-bit weights the f32
  // masters from the initial parameters of `seed`.
  virtual void attach(GptModel& model, std::uint64_t seed) = 0;

  virtual void begin_step() = 0;  // gradients to zero
  // For the step's last backward: called with the first arena offset whose
  // gradients are final (null when the engine does not overlap).
  virtual GradsReadyFn grads_ready_hook() = 0;
  virtual void finish_backward() = 0;  // every reduction of the step complete
  // The tied embedding's gradients this rank sums with the other copy's
  // (whole, or its ZeRO slice, which lines up with the other copy's).
  virtual GradSpan tied_grads() = 0;
  // Summed over `ends` (the first and last pipeline stages), which then both
  // hold the whole gradient.
  void sum_tied_grads(Communicator& ends);

  // Sum of squares of the gradients this rank counts: over the whole grid,
  // each element of the model exactly once (one data replica, one tensor rank
  // for tensors not split over it, the primary copy of a tied tensor).
  virtual double grad_sum_squares() = 0;
  // Any gradient this rank holds, counted or not, is inf or NaN.
  virtual bool grads_nonfinite() = 0;
  // AdamW with the gradients times grad_scale (unscale and clip), then every
  // data rank's weights are current. Ranks that hold no optimizer (gather
  // mode off the root) only take part in the collectives.
  virtual void step(float lr, float grad_scale) = 0;
  // Post-validation: save_step() copies what step() writes; undo_step() puts
  // it back, bit for bit (optim/step_snapshot.hpp). Only engines built for it
  // can (plain data parallelism with parallel.post_validation; the deck
  // refuses the others).
  virtual void save_step() { throw std::logic_error("this gradient engine cannot undo a step"); }
  virtual void undo_step() { throw std::logic_error("this gradient engine cannot undo a step"); }
  // save_step() in pieces of at most `bytes`: true once the copy is whole
  // (save_step() then finishes one begun).
  virtual bool save_step_part(std::size_t bytes) {
    (void)bytes;
    save_step();
    return true;
  }
  virtual void drop_partial_save() {}  // a copy begun is not finished: the next starts over
  virtual std::size_t undo_bytes() const { return 0; }  // the copy's bytes on this rank
  // A tensor this chunk holds but another rank updates (pipedream's last-stage
  // copy of the tied embedding): step() leaves it alone.
  virtual void freeze(const TensorInfo& t) = 0;
  // With 16-bit weights: the weights become the masters' rounding, everywhere.
  virtual void refresh_weights() = 0;

  virtual bool updates_here() const = 0;  // this rank runs an optimizer
  virtual std::int64_t steps_taken() const = 0;
  virtual void set_steps_taken(std::int64_t t) = 0;
  virtual Arena* masters() = 0;  // f32 masters of 16-bit weights (null otherwise)

  // This rank's slice of tensor `t` (of the chunk's table) in state `kind`,
  // `counted` where it is the copy saved (exactly one over the job), and
  // whether every data rank holds the same slices of that kind.
  virtual TensorSlice state_slice(StateKind kind, const TensorInfo& t, const GridCoord& c) = 0;
  virtual bool replicated_over_data(StateKind kind) const = 0;
  // State kept off the backend's memory (offload) is brought into a window
  // there while a checkpoint saves or loads it: state_slice(kind) points into
  // it from open_state(kind) to close_state(kind, changed), which stores what
  // a load wrote. No-ops where the state is resident.
  virtual void open_state(StateKind) {}
  virtual void close_state(StateKind, bool /*changed*/) {}
  // The state of `kind` lives outside its arenas (offload): an asynchronous
  // checkpoint reads it through open_state_reserved() and read_state(), or
  // copies it at the save where the engine cannot.
  virtual bool state_offloaded(StateKind) const { return false; }
  // For an asynchronous save of offloaded state: like open_state, but the
  // slices point into untouched address space that read_state() reads from
  // through the state's home, piece by piece. False where the engine cannot
  // (the save then uses open_state). read_state: false when `at` is not its.
  virtual bool open_state_reserved(StateKind) { return false; }
  virtual bool read_state(const void* /*at*/, std::size_t /*bytes*/, void* /*out*/) {
    return false;
  }
  // Offloaded state this rank holds in host memory, outside the arenas (bytes).
  virtual std::size_t host_bytes() const { return 0; }
  // Something about where the state lives the user should know, else "".
  virtual std::string warning() const { return {}; }

  // Tests: the first gradient this rank holds becomes inf.
  virtual void poison_gradient() = 0;
};

struct Deck;

// The deck sections an engine reads: the model's shape (ZeRO's unit table),
// AdamW's hyperparameters, the data-parallel mode and buckets, the ZeRO stage
// and where offloaded state lives.
struct EngineSections {
  const GptConfig& model;
  const TrainSection& train;
  const ParallelSection& parallel;
  const ZeroSection& zero;
  const OffloadSection& offload;
};
EngineSections engine_sections(const Deck& deck);

struct EngineSetup {
  EngineSections sections;
  Grid& grid;
  ComputeBackend& backend;
  MemoryLedger& ledger;
  StageSpec stage;       // the chunk's blocks
  DType weights, grads;  // precision.dtype, precision.reduce_dtype
};

// The engine the deck asks for (zero.stage, parallel.dp_mode). A ZeRO engine
// builds its storage now; `units` is then the unit layout the model's table
// must use (units split into dp equal slices), else the default.
std::unique_ptr<GradEngine> make_grad_engine(const EngineSetup& s, UnitLayout& units);
// The unit layout ZeRO `stage` uses on dp data ranks (the estimator's too).
UnitLayout zero_unit_layout(const ZeroSection& zero, const GptConfig& model, int dp, int stage,
                            const TensorParallelLayout& tp);

// zb-v: both copies of the tied embedding are chunks of one rank; each gets
// the sum (16-bit gradients added in f32 and rounded, as the MPI sum does).
void sum_tied_grads_locally(GradEngine& first, GradEngine& last, ComputeBackend& backend);

// The tied embedding's two copies summed by messages where the last stage's
// share is final with its last B (tied_table_grads_in_b): each end posts its
// share once final (post) and adds the other's (sum), a + b on both ends,
// one IEEE addition and commutative: the bits of sum_tied_grads' all-reduce.
// A receive needs no call from the sender, so the first stage's sum waits
// for the last stage's share to arrive, not for its weight passes. The
// first end sends a copy (its sum overwrites its share while the send may
// still read it); the last sends its gradients, waited for before its sum.
// f32 gradients of `count` elements; the buffers (counted as buffers): the
// other end's share, and on the first end the copy.
class TiedGradExchange {
 public:
  TiedGradExchange(Communicator& ends, ComputeBackend& backend, MemoryLedger& ledger,
                   std::size_t count);
  ~TiedGradExchange();
  TiedGradExchange(const TiedGradExchange&) = delete;
  TiedGradExchange& operator=(const TiedGradExchange&) = delete;
  void post(GradEngine& engine);  // this end's share is final: sent, the other's receive posted
  void sum(GradEngine& engine);   // posts if not yet, then adds the other end's share

 private:
  Communicator& ends_;
  ComputeBackend& backend_;
  std::unique_ptr<Arena> other_;     // the other end's share, received
  std::unique_ptr<Arena> own_copy_;  // the first end's share as sent
  Request send_, recv_;
  bool posted_ = false;  // this step's share posted
};

// Whether a rank's copy of `t` is the one saved and counted: replicated
// tensors by tensor rank 0, data replicas by data rank 0, secondary copies
// (primary == false) never.
bool counts_copy(const TensorInfo& t, const GridCoord& c, bool replicated_over_data);

}  // namespace trident
