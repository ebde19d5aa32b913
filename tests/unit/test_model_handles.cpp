// A step looks nothing up by name: the model resolves its tensors,
// activations and scratch once when it is built (gpt_handles.cpp), and
// forward and backward (fused, or split into B and W) then make no tensor
// table lookup, for the whole model and each kind of pipeline stage, fp32 and
// bf16, every recompute. (Tensor and sequence parallelism: test_tensor_parallel.)
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "compute/backend.hpp"
#include "memory/ledger.hpp"
#include "model/gpt.hpp"

using namespace trident;

namespace {

constexpr int kMicroBatch = 2, kMicroBatches = 2;

// Table lookups of two forwards and two backwards (each micro-batch into its
// own storage), after the model is built.
std::uint64_t lookups_of_a_step(ComputeBackend& be, const GptConfig& c, const StageSpec& st,
                                const ActivationPolicy& policy, bool split) {
  MemoryLedger ledger;
  GptModelOptions o;
  o.stage = st;
  o.activations = policy;
  GptModel m(c, kMicroBatch, be, ledger, o);
  std::vector<MicroBatchStorage> storage;
  for (int k = 0; k < kMicroBatches; ++k) storage.emplace_back(m, be, ledger, split);
  Arena input_grad(be, ledger, MemCategory::activations, m.boundary_elements());
  m.init_parameters(1);
  const std::size_t tokens = std::size_t(kMicroBatch) * c.seq_len;
  std::vector<std::int32_t> tok(tokens), tgt(tokens);
  std::iota(tok.begin(), tok.end(), 0), std::iota(tgt.begin(), tgt.end(), 1);
  const GradsReadyFn ready = [](std::size_t) {};
  float* to_previous = st.embedding ? nullptr : input_grad.f32();

  const std::uint64_t before = TensorTable::lookups();
  for (MicroBatchStorage& mb : storage) {
    if (!st.embedding) be.zero(m.input_buffer(mb.acts()), m.boundary_elements() * sizeof(float));
    m.forward(mb.acts(), tok.data(), tgt.data(), 1.0f / float(tokens));
  }
  for (std::size_t k = 0; k < storage.size(); ++k) {
    const bool last = k + 1 == storage.size();
    const MicroBatchActs acts = storage[k].acts();
    if (!st.head) be.zero(m.output_grad_buffer(), m.boundary_elements() * sizeof(float));
    if (split) {
      m.backward_input(acts, to_previous);
      m.backward_weights(acts, ready, last);
    } else {
      m.backward(acts, ready, last, to_previous);
    }
    m.output(acts);
  }
  return TensorTable::lookups() - before;
}

}  // namespace

TEST(ModelHandles, AStepLooksNothingUpByName) {
  auto be = make_cpu_backend(1);
  const GptConfig c{3, 32, 4, 16, 257};
  const std::vector<StageSpec> stages = {
      {0, -1, true, true}, {0, 2, true, false}, {1, 1, false, false}, {1, 2, false, true},
      {3, 0, false, true}};
  for (const StageSpec& st : stages)
    for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full})
      for (Precision dtype : {Precision::fp32, Precision::bf16})
        for (bool split : {false, true}) {
          const ActivationPolicy policy = make_activation_policy(recompute, true, 1, false, dtype);
          const std::string what =
              fmt::format("stage from block {} ({} blocks) {} {}{}", st.first_block,
                          st.blocks(c.layers), choice_name(recompute), choice_name(dtype),
                          split ? " split into B and W" : "");
          EXPECT_EQ(lookups_of_a_step(*be, c, st, policy, split), 0u) << what;
        }
}

// The counter the test above relies on does count.
TEST(ModelHandles, TheLookupCounterCounts) {
  TensorTable t;
  TensorInfo info;
  info.name = "w";
  info.shape = {4};
  t.add(info);
  const std::uint64_t before = TensorTable::lookups();
  t.at("w");
  t.find("missing");
  EXPECT_EQ(TensorTable::lookups() - before, 2u);
}
