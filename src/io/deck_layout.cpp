// The deck against the job: the layout (dp x tp x pp) for a world of N ranks,
// and every rule that ties the model, the batch and the schedule to it.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/deck.hpp"

namespace trident {

GridShape resolve_layout(Deck& d, int world) {
  auto& p = d.parallel;
  const std::string& f = d.path;
  const auto& m = d.model;
  auto divisors = [](int n) {
    std::vector<int> v;
    for (int i = 1; i <= n && v.size() < 10; ++i)
      if (n % i == 0) v.push_back(i);
    return fmt::format("{}", fmt::join(v, ", "));
  };
  if (m.heads % p.tp != 0)
    throw InputError(fmt::format("{}: [parallel] tp = {} does not divide model.heads = {} (each "
                                 "tensor rank owns whole heads); choose tp in {{{}}}",
                                 f, p.tp, m.heads, divisors(m.heads)));
  // Each tensor rank owns whole key/value heads too; replicating them where
  // tp > kv_heads (as Megatron does) is not supported.
  if (m.kv_head_count() % p.tp != 0)
    throw InputError(fmt::format("{}: [parallel] tp = {} does not divide model.kv_heads = {} "
                                 "(each tensor rank owns whole key/value heads; replicating them "
                                 "is not supported); choose tp in {{{}}}",
                                 f, p.tp, m.kv_head_count(), divisors(m.kv_head_count())));
  if (m.d_ff() % p.tp != 0)
    throw InputError(fmt::format("{}: [parallel] tp = {} does not divide the MLP width {} = {}; "
                                 "choose tp in {{{}}}",
                                 f, p.tp, m.ffn_hidden > 0 ? "model.ffn_hidden" : "4 * model.d_model",
                                 m.d_ff(), divisors(m.d_ff())));
  if (p.schedule == ScheduleKind::pipedream && p.pp >= 2 && !m.tied_embeddings)
    throw InputError(fmt::format("{}: [parallel] schedule = \"pipedream\" keeps the tied "
                                 "embedding's two copies in step; with model.tied_embeddings = "
                                 "false choose another schedule", f));
  if (p.schedule == ScheduleKind::zb_v && p.pp >= 2) {
    // The V: two chunks per rank, whatever virtual_stages said (1 or 2).
    if (p.virtual_stages > 2)
      throw InputError(fmt::format("{}: [parallel] schedule = \"zb-v\" runs 2 chunks per rank; "
                                   "set virtual_stages = 2 (or leave it out)", f));
    p.virtual_stages = 2;
    if (p.partition != PartitionMethod::uniform)
      throw InputError(fmt::format("{}: [parallel] schedule = \"zb-v\" uses the uniform "
                                   "partition; set partition = \"uniform\"", f));
    if (m.layers % (2 * p.pp) != 0)
      throw InputError(fmt::format("{}: [parallel] schedule = \"zb-v\" splits model.layers = {} "
                                   "into 2 * pp = {} equal chunks; choose layers divisible by {}, "
                                   "or another schedule", f, m.layers, 2 * p.pp, 2 * p.pp));
  }
  const int chunks = p.virtual_stages;
  if (p.schedule == ScheduleKind::interleaved) {
    if (chunks < 2)
      throw InputError(fmt::format("{}: [parallel] schedule = \"interleaved\" needs "
                                   "virtual_stages >= 2 (with 1 it is plain 1f1b)", f));
    if (p.pp < 2)
      throw InputError(fmt::format("{}: [parallel] schedule = \"interleaved\" needs pp >= 2 "
                                   "(with one stage there is nothing to interleave)", f));
    if (p.partition != PartitionMethod::uniform)
      throw InputError(fmt::format("{}: [parallel] schedule = \"interleaved\" uses the uniform "
                                   "partition; set partition = \"uniform\"", f));
  } else if (splits_backward(p.schedule) && p.pp < 2) {
    throw InputError(fmt::format("{}: [parallel] schedule = \"{}\" needs pp >= 2 (one stage "
                                 "has no bubble to fill); set pp, or use schedule = \"1f1b\"",
                                 f, choice_name(p.schedule)));
  } else if (chunks != 1 && p.schedule != ScheduleKind::zb_v) {
    throw InputError(fmt::format("{}: [parallel] virtual_stages = {} needs schedule = "
                                 "\"interleaved\"", f, chunks));
  }
  if (p.partition == PartitionMethod::uniform && m.layers % (p.pp * chunks) != 0)
    throw InputError(fmt::format("{}: [parallel] model.layers = {} is not divisible by pp * "
                                 "virtual_stages = {} * {}; change one, or use partition = "
                                 "\"parameters\" or \"profile\"", f, m.layers, p.pp, chunks));
  if (m.layers < p.pp * chunks)
    throw InputError(fmt::format("{}: [parallel] model.layers = {} is fewer than the {} pipeline "
                                 "stages; every stage needs a block", f, m.layers, p.pp * chunks));
  if (world % (p.tp * p.pp) != 0)
    throw InputError(fmt::format("{}: [parallel] tp * pp = {} does not divide the {} ranks of the "
                                 "job; launch a multiple of {} ranks", f, p.tp * p.pp, world,
                                 p.tp * p.pp));
  if (p.dp == 0) p.dp = world / (p.tp * p.pp);
  if (p.dp * p.tp * p.pp != world)
    throw InputError(fmt::format("{}: [parallel] dp * tp * pp = {} * {} * {} = {} but the job has "
                                 "{} ranks; launch {} ranks, or drop dp to derive it", f, p.dp,
                                 p.tp, p.pp, p.dp * p.tp * p.pp, world, p.dp * p.tp * p.pp));
  auto& t = d.train;
  if (t.micro_batch == 0) t.micro_batch = std::max(1, t.batch / p.dp);
  if (t.batch % (p.dp * t.micro_batch) != 0)
    throw InputError(fmt::format("{}: [train] batch = {} is not a multiple of dp * micro_batch = "
                                 "{} * {}; choose batch as a multiple of {}", f, t.batch, p.dp,
                                 t.micro_batch, p.dp * t.micro_batch));
  const int micro_batches = t.batch / (p.dp * t.micro_batch);
  if (p.schedule == ScheduleKind::interleaved && micro_batches % p.pp != 0)
    throw InputError(fmt::format("{}: [parallel] schedule = \"interleaved\" needs the {} "
                                 "micro-batches per step (batch / (dp * micro_batch)) to be a "
                                 "multiple of pp = {}", f, micro_batches, p.pp));
  if (p.sequence_parallel && p.tp > 1 && (t.micro_batch * m.seq_len) % p.tp != 0)
    throw InputError(fmt::format("{}: [parallel] sequence_parallel splits the micro_batch * "
                                 "seq_len = {} tokens over tp = {} ranks; choose a micro_batch "
                                 "or seq_len that makes it divisible", f,
                                 t.micro_batch * m.seq_len, p.tp));
  if (t.recompute == Recompute::full && t.partition_activations && p.tp > 1 &&
      !p.sequence_parallel &&
      (t.micro_batch * m.seq_len) % p.tp != 0)
    throw InputError(fmt::format("{}: [train] partition_activations splits the micro_batch * "
                                 "seq_len = {} tokens of each saved block input over tp = {} "
                                 "ranks; choose a divisible micro_batch or seq_len, or set "
                                 "partition_activations = false", f, t.micro_batch * m.seq_len,
                                 p.tp));
  if (t.eval_sequences == 0) t.eval_sequences = t.batch;
  if (t.eval_sequences % (p.dp * t.micro_batch) != 0)
    throw InputError(fmt::format("{}: [train] eval_sequences = {} is not a multiple of dp * "
                                 "micro_batch = {}; choose a multiple of {}", f, t.eval_sequences,
                                 p.dp * t.micro_batch, p.dp * t.micro_batch));
  return GridShape{p.tp, p.dp, p.pp};
}

}  // namespace trident
