// The model reaches attention and the tensor group only through the operators
// it is given (GptModelOptions::attention, ::tensor_group): wrapping the
// defaults changes no number, and every call of a pass goes through them
// (what another parallelism of the sequence would replace).
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "compute/backend.hpp"
#include "memory/ledger.hpp"
#include "model/gpt.hpp"

using namespace trident;

namespace {

struct CountingAttention final : AttentionOp {
  explicit CountingAttention(ComputeBackend& be) : local(be) {}
  void forward(float* out, float* lse, MatrixIn qkv, const AttentionShape& s, bool bf16) override {
    ++forwards;
    local.forward(out, lse, qkv, s, bf16);
  }
  void backward(float* dqkv, MatrixIn dout, MatrixIn qkv, const float* out, const float* lse,
                const AttentionShape& s, bool bf16) override {
    ++backwards;
    local.backward(dqkv, dout, qkv, out, lse, s, bf16);
  }
  void forward_rounded(float* out, std::uint16_t* bits, float* lse, MatrixIn qkv,
                       const AttentionShape& s) override {
    ++forwards;
    local.forward_rounded(out, bits, lse, qkv, s);
  }
  void backward_rounded(float* dqkv, std::uint16_t* bits, MatrixIn dout, MatrixIn qkv,
                        const float* out, const float* lse, const AttentionShape& s) override {
    ++backwards;
    local.backward_rounded(dqkv, bits, dout, qkv, out, lse, s);
  }
  LocalAttention local;
  int forwards = 0, backwards = 0;
};

struct CountingGroup final : TensorGroupOps {
  void all_reduce(float* b, std::size_t n) override { ++calls, solo.all_reduce(b, n); }
  void gather_tokens(const float* l, float* f, std::size_t n) override {
    ++calls, solo.gather_tokens(l, f, n);
  }
  void reduce_scatter_tokens(const float* f, float* l, std::size_t n) override {
    ++calls, solo.reduce_scatter_tokens(f, l, n);
  }
  void max_over_vocab(float* m, std::size_t n) override { ++calls, solo.max_over_vocab(m, n); }
  void sum_over_vocab(float* p, std::size_t n) override { ++calls, solo.sum_over_vocab(p, n); }
  SoloTensorGroup solo;
  int calls = 0;
};

struct PassResult {
  double loss = 0;
  std::vector<float> grads;
};

PassResult train_one(ComputeBackend& be, const GptConfig& c, Precision dtype, AttentionOp* attention,
               TensorGroupOps* group) {
  MemoryLedger ledger;
  GptModelOptions o;
  o.activations = make_activation_policy(Recompute::none, true, 1, false, dtype);
  o.attention = attention;
  o.tensor_group = group;
  const int B = 2;
  GptModel m(c, B, be, ledger, o);
  MicroBatchStorage storage(m, be, ledger);
  m.init_parameters(3);
  m.grads().zero();
  const std::size_t n = std::size_t(B) * c.seq_len;
  std::vector<std::int32_t> tok(n), tgt(n);
  std::iota(tok.begin(), tok.end(), 5), std::iota(tgt.begin(), tgt.end(), 6);
  PassResult p;
  p.loss = m.forward(storage.acts(), tok.data(), tgt.data(), 1.0f / float(n));
  m.backward(storage.acts(), nullptr, true);
  const Arena& g = m.grads();
  p.grads.assign(g.f32(), g.f32() + g.numel());
  return p;
}

}  // namespace

TEST(ModelOperators, AttentionAndTheTensorGroupGoThroughTheGivenOperators) {
  auto be = make_cpu_backend(1);
  const GptConfig c{3, 16, 4, 32, 257};
  for (Precision dtype : {Precision::fp32, Precision::bf16}) {
    const PassResult plain = train_one(*be, c, dtype, nullptr, nullptr);
    CountingAttention attention(*be);
    CountingGroup group;
    const PassResult wrapped = train_one(*be, c, dtype, &attention, &group);
    EXPECT_EQ(wrapped.loss, plain.loss) << choice_name(dtype);
    EXPECT_EQ(wrapped.grads, plain.grads) << choice_name(dtype);
    EXPECT_EQ(attention.forwards, c.layers) << choice_name(dtype);
    EXPECT_EQ(attention.backwards, c.layers) << choice_name(dtype);
    EXPECT_GT(group.calls, 0) << choice_name(dtype);
  }
}

// A model on one of several tensor ranks cannot run without its group.
TEST(ModelOperators, SeveralTensorRanksNeedATensorGroup) {
  auto be = make_cpu_backend(1);
  MemoryLedger ledger;
  GptModelOptions o;
  o.tp = TensorParallelLayout{2, 0, false};
  EXPECT_THROW(GptModel(GptConfig{1, 16, 4, 32, 257}, 2, *be, ledger, o), std::logic_error);
}
