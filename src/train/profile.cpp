#include "train/profile.hpp"

#include <numeric>
#include <vector>

#include "core/timer.hpp"
#include "model/gpt.hpp"
#include "parallel/tensor/tensor_comm.hpp"

namespace trident {
namespace {

// Seconds for forward + backward of a model made of `spec`, best of a few runs.
double time_stage(const Deck& deck, Grid& grid, ComputeBackend& be, const StageSpec& spec) {
  MemoryLedger scratch_ledger;
  GptModelOptions o;
  o.tp = {grid.shape().tp, grid.coord().tp, deck.parallel.sequence_parallel};
  TensorComm group(&grid.tensor(), o.tp);
  o.tensor_group = &group;
  o.stage = spec;
  const int B = deck.train.micro_batch, T = deck.model.seq_len;
  GptModel m(deck.model, B, be, scratch_ledger, o);
  MicroBatchStorage storage(m, be, scratch_ledger);
  const MicroBatchActs acts = storage.acts();
  Arena input_grad;  // where a stage without the embeddings leaves its input's gradient
  if (!spec.embedding)
    input_grad = Arena(be, scratch_ledger, MemCategory::activations, m.boundary_elements());
  m.init_parameters(deck.train.seed);
  std::vector<std::int32_t> tok(std::size_t(B) * T), tgt(tok.size());
  std::iota(tok.begin(), tok.end(), 0);
  for (auto& x : tok) x %= deck.model.vocab;
  tgt = tok;
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const double t0 = now_seconds();
    m.forward(acts, tok.data(), tgt.data(), spec.head ? 1.0f : 0.0f);
    if (!spec.head) be.zero(m.output_grad_buffer(), m.boundary_elements() * sizeof(float));
    m.backward(acts, nullptr, true, input_grad.f32());
    be.synchronize();
    best = std::min(best, now_seconds() - t0);
  }
  return best;
}

}  // namespace

StageCosts profile_stage_costs(const Deck& deck, Grid& grid, ComputeBackend& be) {
  StageCosts c;
  const double block = time_stage(deck, grid, be, StageSpec{0, 1, false, false});
  c.block.assign(deck.model.layers, block);
  c.first = time_stage(deck, grid, be, StageSpec{0, 0, true, false});
  c.last = time_stage(deck, grid, be, StageSpec{0, 0, false, true});
  // One boundary: the activation forward and its gradient back.
  const double bytes = 2.0 * deck.train.micro_batch * deck.model.seq_len * deck.model.d_model *
                       sizeof(float) / grid.shape().tp;
  c.boundary = bytes / (deck.parallel.p2p_gbps * 1e9 / 8);
  // Every rank must choose the same partition: agree on rank 0's measurement.
  std::vector<double> v = {block, c.first, c.last};
  grid.world().broadcast(v.data(), v.size(), DType::f64, 0);
  c.block.assign(deck.model.layers, v[0]);
  c.first = v[1];
  c.last = v[2];
  return c;
}

}  // namespace trident
