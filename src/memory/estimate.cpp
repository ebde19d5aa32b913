#include "memory/estimate.hpp"

#include "model/gpt.hpp"
#include "model/gpt_params.hpp"
#include "parallel/pipeline/partition.hpp"
#include "parallel/pipeline/schedule.hpp"
#include "parallel/tensor/tensor_layout.hpp"
#include "parallel/zero/zero_plan.hpp"
#include "parallel/zero/zero_storage.hpp"

namespace trident {

double MemoryEstimate::model_state() const {
  return bytes[int(MemCategory::parameters)] + bytes[int(MemCategory::gradients)] +
         bytes[int(MemCategory::optimizer)];
}

double MemoryEstimate::peak() const {
  double s = 0;
  for (double b : bytes) s += b;
  return s;
}

namespace {

// The blocks each virtual stage owns, as the trainer chooses them (the profile
// partitioner needs measurements: it is predicted by parameter counts here).
Partition predicted_partition(const Deck& deck, int virtual_stages) {
  const auto& m = deck.model;
  if (deck.parallel.partition == "uniform") return partition_uniform(m.layers, virtual_stages);
  StageCosts costs;
  costs.block.assign(m.layers, 0.0);
  const TensorTable whole = build_gpt_param_table(m);  // a local: tensors() is a reference
  for (const TensorInfo& t : whole.tensors()) {
    if (t.layer >= 0) costs.block[t.layer] += double(t.numel);
    else if (t.name == "lnf.w" || t.name == "lnf.b") costs.last += double(t.numel);
    else costs.first += double(t.numel);
  }
  return partition_min_max(costs, virtual_stages);
}

}  // namespace

MemoryEstimate estimate_memory(const Deck& deck, const GridShape& shape, int stage) {
  MemoryEstimate e;
  const GptConfig& m = deck.model;
  const TensorParallelLayout tp{shape.tp, 0, deck.parallel.sequence_parallel};
  const std::size_t align = stage > 0 ? std::size_t(shape.dp) * TensorTable::kAlign : 1;
  const int v = deck.parallel.virtual_stages, V = shape.pp * v;
  const int B = deck.train.micro_batch > 0 ? deck.train.micro_batch : deck.train.batch / shape.dp;
  const int micro_batches = std::max(1, deck.train.batch / (shape.dp * B));
  const Partition part = predicted_partition(deck, V);
  const auto actions = build_schedule(parse_schedule(deck.parallel.schedule), shape.pp, 0,
                                      micro_batches, v);
  const double f = sizeof(float), tokens = double(B) * m.seq_len;
  auto at = [&](MemCategory c) -> double& { return e.bytes[int(c)]; };
  for (int c = 0; c < v; ++c) {  // rank 0's chunks: virtual stages c * pp
    const int vs = c * shape.pp;
    const StageSpec spec{part[vs], part[vs + 1] - part[vs], vs == 0, vs == V - 1};
    const TensorTable table = build_gpt_param_table(m, tp, align, spec);
    const double n = double(table.size());
    if (stage == 0) {
      at(MemCategory::parameters) += n * f;
      // pipedream: stage 0 stashes the weights of its pp - 1 forwards ahead,
      // and receives the head's embedding gradients in a buffer of their own.
      if (deck.parallel.schedule == "pipedream") {
        at(MemCategory::parameters) += (shape.pp - 1) * n * f;
        if (shape.pp > 1) at(MemCategory::buffers) += double(table.at("wte").numel) * f;
      }
      at(MemCategory::gradients) += n * f;
      at(MemCategory::optimizer) += 2 * n * f;  // rank 0 updates in both dp modes
    } else {
      const ZeroPlan plan(table, shape.dp, 0, std::size_t(deck.zero.persistence_threshold));
      const double shard = double(plan.shard_size());
      const double large = double(ZeroStorage::large_slot_elements(plan));
      const double small = double(ZeroStorage::small_slot_elements(plan));
      auto pool = [&](int slots) { return large + (slots - 1) * small; };
      at(MemCategory::parameters) += (stage <= 2 ? n : shard + pool(ZeroStorage::kParamSlots)) * f;
      at(MemCategory::gradients) += ((stage == 1 ? n : pool(ZeroStorage::kGradSlots)) + shard) * f;
      at(MemCategory::optimizer) += 2 * shard * f;
      if (stage >= 2)
        at(MemCategory::buffers) +=
            ZeroStorage::kRecvBuffers * double(std::size_t(large) / shape.dp) * f;
    }
    const ActivationPolicy policy =
        make_activation_policy(deck.train.recompute, deck.train.partition_activations, shape.tp,
                               tp.sp(), deck.precision.dtype);
    TensorTable saved = GptModel::saved_activation_table(m, B, tp, spec, policy);
    saved.align_end(TensorTable::kAlign);
    TensorTable saved16 = GptModel::saved_16bit_table(m, B, tp, spec, policy);
    saved16.align_end(2 * TensorTable::kAlign);
    const int slots = max_in_flight(actions, c);
    at(MemCategory::activations) += (double(saved.size()) * slots +
                                     double(GptModel::work_table(m, B, tp, policy).size()) +
                                     double(GptModel::scratch_table(m, B, tp).size())) * f +
                                    double(saved16.size()) * slots * 2 +
                                    2 * tokens * slots * sizeof(std::int32_t);
  }
  e.parameters = double(gpt_num_parameters(m));
  return e;
}

double zero_paper_bytes(double psi, int dp, int stage, bool mixed) {
  const double p = mixed ? 2 : 4, g = mixed ? 2 : 4, k = mixed ? 12 : 8;
  switch (stage) {
    case 0: return (p + g + k) * psi;
    case 1: return (p + g) * psi + k * psi / dp;
    case 2: return p * psi + (g + k) * psi / dp;
    default: return (p + g + k) * psi / dp;
  }
}

}  // namespace trident
