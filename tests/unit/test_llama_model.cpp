// The Llama family's model (rotary positions, RMSNorm, grouped-query
// attention, SwiGLU, no biases, an untied head): its parameter table has the
// tensors and global layouts param_table.cpp documents, its gradients are
// the loss's (central differences), and recompute and the split backward
// give the plain run's numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/tensor_slice.hpp"
#include "compute/backend.hpp"
#include "memory/ledger.hpp"
#include "model/gpt.hpp"

using namespace trident;

namespace {

GptConfig llama_config() {
  GptConfig c{2, 16, 4, 8, 40};
  c.kv_heads = 2;
  c.positions = PositionEncoding::rope;
  c.norm = NormKind::rmsnorm;
  c.mlp = MlpKind::swiglu;
  c.ffn_hidden = 24;
  c.bias = false;
  c.tied_embeddings = false;
  return c;
}

constexpr int kBatch = 2;

struct PassResult {
  double loss = 0;  // mean over tokens
  std::vector<float> grads;
};

// One forward and backward over a fixed micro-batch of the model as it is.
PassResult run_pass(GptModel& m, MicroBatchStorage& storage, bool split = false) {
  const GptConfig& c = m.config();
  const std::size_t n = std::size_t(kBatch) * c.seq_len;
  std::vector<std::int32_t> tok(n), tgt(n);
  for (std::size_t i = 0; i < n; ++i) tok[i] = int(7 * i + 3) % c.vocab, tgt[i] = int(5 * i + 1) % c.vocab;
  m.grads().zero();
  PassResult p;
  p.loss = m.forward(storage.acts(), tok.data(), tgt.data(), 1.0f / float(n)) / double(n);
  if (split) {
    m.backward_input(storage.acts());
    m.backward_weights(storage.acts(), nullptr, true);
  } else {
    m.backward(storage.acts(), nullptr, true);
  }
  p.grads.assign(m.grads().f32(), m.grads().f32() + m.grads().numel());
  return p;
}

PassResult pass_with(const GptConfig& c, Recompute recompute, bool split) {
  auto be = make_cpu_backend(1);
  MemoryLedger ledger;
  GptModelOptions o;
  o.activations = make_activation_policy(recompute, false, 1, false, Precision::fp32);
  GptModel m(c, kBatch, *be, ledger, o);
  MicroBatchStorage storage(m, *be, ledger, split);
  m.init_parameters(3);
  return run_pass(m, storage, split);
}

}  // namespace

TEST(LlamaModel, TableHoldsTheChosenTensorsInTheirGlobalLayouts) {
  const GptConfig c = llama_config();
  const TensorTable t = build_gpt_param_table(c);
  EXPECT_EQ(t.find("wpe"), nullptr);           // rotary positions
  EXPECT_EQ(t.find("h.0.ln1.b"), nullptr);     // RMSNorm
  EXPECT_EQ(t.find("lnf.b"), nullptr);
  EXPECT_EQ(t.find("h.0.attn.qkv.b"), nullptr);  // no biases
  EXPECT_EQ(t.find("h.1.mlp.proj.b"), nullptr);
  const std::int64_t C = 16, KV = 8, F = 24;
  EXPECT_EQ(t.at("h.0.attn.qkv.w").global_shape, (std::vector<std::int64_t>{C + 2 * KV, C}));
  EXPECT_EQ(t.at("h.0.mlp.fc.w").global_shape, (std::vector<std::int64_t>{2, F, C}));
  EXPECT_EQ(t.at("lm_head.w").global_shape, (std::vector<std::int64_t>{40, C}));
  std::size_t numel = 0;
  for (const TensorInfo& x : t.tensors()) numel += std::size_t(x.numel);
  EXPECT_GT(numel, gpt_num_parameters(c));  // the vocabulary tables' padding rows
  std::size_t unpadded = 0;
  for (const TensorInfo& x : t.tensors())
    for (std::size_t i = 0; i < x.numel; ++i) unpadded += x.global_index(i) >= 0;
  EXPECT_EQ(unpadded, gpt_num_parameters(c));
}

// Tensor rank 1 of 2 holds query heads 2-3 and key/value head 1: its qkv rows
// are q rows [8, 16), k rows [16 + 4, 16 + 8) and v rows [24 + 4, 24 + 8) of
// the global [q | k | v]; its fc rows are gate rows [12, 24) and up rows
// [24 + 12, 48).
TEST(LlamaModel, TensorRanksHoldTheirQueryAndKeyValueHeadsAndSwigluHalves) {
  const GptConfig c = llama_config();
  const TensorTable t = build_gpt_param_table(c, TensorParallelLayout{2, 1, false});
  const TensorInfo& qkv = t.at("h.0.attn.qkv.w");
  const std::int64_t C = 16;
  ASSERT_EQ(qkv.shape, (std::vector<std::int64_t>{16, C}));
  auto global_row = [&](const TensorInfo& x, std::int64_t local_row) {
    return x.global_index(std::size_t(local_row * C)) / C;
  };
  EXPECT_EQ(global_row(qkv, 0), 8);
  EXPECT_EQ(global_row(qkv, 7), 15);
  EXPECT_EQ(global_row(qkv, 8), 20);   // k of key/value head 1
  EXPECT_EQ(global_row(qkv, 12), 28);  // v of key/value head 1
  EXPECT_EQ(global_row(qkv, 15), 31);
  const TensorInfo& fc = t.at("h.0.mlp.fc.w");
  ASSERT_EQ(fc.shape, (std::vector<std::int64_t>{2, 12, C}));
  EXPECT_EQ(global_row(fc, 0), 12);
  EXPECT_EQ(global_row(fc, 12), 36);
}

// Central differences of the mean loss against backward's gradients, at
// `samples` elements of each tensor `pick` chooses. The qkv weights are first
// scaled up from their initial 0.02 so that attention's scores are of order
// one and the gradients through RoPE and the shared key/value heads far
// above f32's noise; an element where the differences at h and h/2 disagree
// (the loss too curved there for h) is not judged, and few may be.
template <class Pick>
void expect_central_differences(GptModel& m, MicroBatchStorage& storage, Pick&& pick,
                                const std::string& what) {
  float* params = m.params().f32();
  auto is_qkv = [](const TensorInfo& t) { return t.name.find("attn.qkv.w") != std::string::npos; };
  for (const TensorInfo& t : m.param_table().tensors())
    if (is_qkv(t))
      for (std::size_t i = 0; i < t.numel; ++i) params[t.offset + i] *= 8.0f;
  const PassResult base = run_pass(m, storage);
  auto central = [&](std::size_t i, float h) {
    const float keep = params[i];
    params[i] = keep + h;
    const double up = run_pass(m, storage).loss;
    params[i] = keep - h;
    const double down = run_pass(m, storage).loss;
    params[i] = keep;
    return (up - down) / (2.0 * double(h));
  };
  double worst = 0;
  int judged = 0, curved = 0;
  for (const TensorInfo& t : m.param_table().tensors()) {
    const std::size_t samples = pick(t);
    for (std::size_t k = 0; k < samples; ++k) {
      const std::size_t i = t.offset + (k * 7919) % t.numel;
      if (t.global_index(i - t.offset) < 0) continue;  // padding rows
      const double fd = central(i, 5e-3f), g = base.grads[i];
      const double tol = 1e-3 + 2e-2 * std::abs(fd);
      if (std::abs(central(i, 1e-2f) - fd) > 0.25 * tol) {
        ++curved;
        continue;
      }
      ++judged;
      worst = std::max(worst, std::abs(fd - g));
      EXPECT_NEAR(g, fd, tol) << what << ": " << t.name << " element " << i - t.offset;
    }
  }
  EXPECT_GT(judged, 0) << what;
  EXPECT_LE(curved, judged / 10) << what;
  std::printf("%s: worst |finite difference - gradient| %.2e (%d elements, %d too curved)\n",
              what.c_str(), worst, judged, curved);
}

TEST(LlamaModel, GradientsAreTheLossesCentralDifferences) {
  auto be = make_cpu_backend(1);
  MemoryLedger ledger;
  GptModel m(llama_config(), kBatch, *be, ledger);
  MicroBatchStorage storage(m, *be, ledger);
  m.init_parameters(3);
  expect_central_differences(
      m, storage,
      [](const TensorInfo& t) { return t.name.find("attn.qkv.w") != std::string::npos ? 48 : 4; },
      "llama");
}

TEST(LlamaModel, RecomputeAndTheSplitBackwardGiveThePlainRunsNumbers) {
  const GptConfig c = llama_config();
  const PassResult plain = pass_with(c, Recompute::none, false);
  for (Recompute r : {Recompute::selective, Recompute::full}) {
    const PassResult again = pass_with(c, r, false);
    EXPECT_EQ(again.loss, plain.loss);
    EXPECT_EQ(again.grads, plain.grads);
  }
  const PassResult split = pass_with(c, Recompute::none, true);
  EXPECT_EQ(split.loss, plain.loss);
  EXPECT_EQ(split.grads, plain.grads);
}

// Each choice on its own is a model too (multi-query attention with learned
// positions; RoPE with SwiGLU; RMSNorm, no biases and an untied head).
TEST(LlamaModel, EachChoiceAloneHasTheLossesGradients) {
  for (int variant = 0; variant < 3; ++variant) {
    GptConfig c{1, 16, 4, 8, 40};
    if (variant == 0) c.kv_heads = 1;
    if (variant == 1) c.positions = PositionEncoding::rope, c.mlp = MlpKind::swiglu;
    if (variant == 2) c.norm = NormKind::rmsnorm, c.tied_embeddings = false, c.bias = false;
    auto be = make_cpu_backend(1);
    MemoryLedger ledger;
    GptModel m(c, kBatch, *be, ledger);
    MicroBatchStorage storage(m, *be, ledger);
    m.init_parameters(5);
    expect_central_differences(
        m, storage, [](const TensorInfo& t) { return t.layer >= 0 ? 6 : 2; },
        "variant " + std::to_string(variant));
  }
}

// Checkpoints write a segmented shard box by box: each of rank 1's boxes of
// the grouped qkv lands where global_index puts its elements.
TEST(LlamaModel, CheckpointBoxesOfASegmentedShardFollowItsGlobalIndex) {
  const GptConfig c = llama_config();
  const TensorTable t = build_gpt_param_table(c, TensorParallelLayout{2, 1, false});
  const TensorInfo& qkv = t.at("h.0.attn.qkv.w");
  for (auto [lo, hi] : {std::pair<std::size_t, std::size_t>{0, qkv.numel}, {100, 150}, {120, 200}}) {
    std::size_t covered = 0;
    for (const SliceBox& b : slice_boxes(qkv, lo, hi))
      for_each_run(qkv, b, [&](std::size_t local, std::uint64_t global, std::size_t n) {
        for (std::size_t i = 0; i < n; ++i)
          EXPECT_EQ(qkv.global_index(local + i), std::int64_t(global + i)) << local + i;
        covered += n;
      });
    EXPECT_EQ(covered, hi - lo);
  }
}
