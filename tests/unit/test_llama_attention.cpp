// Grouped-query attention (compute/cpu/gqa_attention.cpp) in float against
// multi-head attention in double with each key/value head repeated for its
// group (llama_reference.hpp): out, lse and the gradient of q, k and v, for
// GQA, MQA (KVH = 1), T = 1, T inside one tile, at its boundary and past it.
// The reference's gradient is itself checked by finite differences. With
// KVH = NH the kernel is multi-head attention: it equals the CPU backend's.
// The same bits at any thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <stdexcept>
#include <vector>

#include "compute/backend.hpp"
#include "compute/cpu/llama_kernels.hpp"
#include "support/random_values.hpp"
#include "unit/llama_reference.hpp"

namespace {

using Vec = std::vector<float>;
using trident::testing::random_normals;
using namespace trident::testing::llama;
namespace cpu = trident::cpu;

struct Result {
  Vec out, lse, dqkv;
};

Result run_gqa(const Vec& qkv, const Vec& dout, const GqaShape& s, const Vec* dqkv0 = nullptr) {
  Result r{Vec(s.out_size()), Vec(s.lse_size()), dqkv0 ? *dqkv0 : Vec(s.qkv_size(), 0.0f)};
  cpu::gqa_attention_forward(r.out.data(), r.lse.data(), qkv.data(), s.B, s.T, s.NH, s.KVH, s.hs);
  cpu::gqa_attention_backward(r.dqkv.data(), dout.data(), qkv.data(), r.out.data(), r.lse.data(),
                              s.B, s.T, s.NH, s.KVH, s.hs);
  return r;
}

std::string name(const GqaShape& s) {
  return "B " + std::to_string(s.B) + " T " + std::to_string(s.T) + " NH " +
         std::to_string(s.NH) + " KVH " + std::to_string(s.KVH) + " hs " + std::to_string(s.hs);
}

TEST(GqaAttention, MatchesRepeatedKeyValueHeadsInDouble) {
  const int tile = cpu::kGqaTile;
  for (GqaShape s : {GqaShape{2, 1, 4, 2, 8}, GqaShape{1, 37, 6, 3, 6},
                     GqaShape{2, tile, 8, 2, 16}, GqaShape{1, tile + 7, 4, 1, 10},
                     GqaShape{1, 2 * tile + 3, 6, 2, 4}}) {
    const Vec qkv = random_normals(s.qkv_size(), 20 + s.T), dout = random_normals(s.out_size(), 21);
    const Result r = run_gqa(qkv, dout, s);
    DVec ref_lse;
    const DVec ref = gqa_attention(widen(qkv), s, &ref_lse);
    EXPECT_LT(relative_gap(r.out, ref), 5e-6) << name(s);
    EXPECT_LT(relative_gap(r.lse, ref_lse), 5e-6) << name(s);
    const DVec ref_grad = gqa_attention_grad(widen(qkv), widen(dout), s);
    EXPECT_LT(relative_gap(r.dqkv, ref_grad), 2e-5) << name(s);
  }
}

TEST(GqaAttention, ReferenceGradientMatchesFiniteDifferences) {
  for (GqaShape s : {GqaShape{2, 6, 4, 2, 4}, GqaShape{1, 5, 3, 1, 6}}) {
    const DVec qkv = widen(random_normals(s.qkv_size(), 22)),
               dout = widen(random_normals(s.out_size(), 23));
    const DVec fd =
        finite_difference([&](const DVec& v) { return gqa_attention(v, s); }, qkv, dout);
    EXPECT_LT(relative_gap(gqa_attention_grad(qkv, dout, s), fd), 1e-8) << name(s);
  }
}

TEST(GqaAttention, BackwardAddsIntoTheGradient) {
  const GqaShape s{1, 20, 4, 2, 8};
  const Vec qkv = random_normals(s.qkv_size(), 24), dout = random_normals(s.out_size(), 25);
  const Vec start = random_normals(s.qkv_size(), 26);
  const Result fresh = run_gqa(qkv, dout, s), added = run_gqa(qkv, dout, s, &start);
  Vec diff(start.size());
  for (std::size_t i = 0; i < diff.size(); ++i) diff[i] = added.dqkv[i] - start[i];
  EXPECT_LT(relative_gap(diff, fresh.dqkv), 1e-6);
}

// [q | k | v] with KVH = NH is the MHA kernel's (B, T, 3C) layout.
TEST(GqaAttention, WithAsManyKeyValueHeadsAsQueryHeadsItIsTheBackendsAttention) {
  const int tile = cpu::kGqaTile;
  for (GqaShape s : {GqaShape{2, 45, 4, 4, 8}, GqaShape{1, 2 * tile + 5, 2, 2, 16}}) {
    const Vec qkv = random_normals(s.qkv_size(), 27), dout = random_normals(s.out_size(), 28);
    const Result r = run_gqa(qkv, dout, s);
    auto backend = trident::make_cpu_backend(1);
    const int C = s.NH * s.hs;
    Vec out(s.out_size()), lse(s.lse_size()), dqkv(s.qkv_size(), 0.0f);
    backend->attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, C, s.NH);
    backend->attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B,
                                s.T, C, s.NH);
    EXPECT_LT(relative_gap(r.out, out), 2e-6) << name(s);
    EXPECT_LT(relative_gap(r.lse, lse), 2e-6) << name(s);
    EXPECT_LT(relative_gap(r.dqkv, dqkv), 1e-5) << name(s);
  }
}

TEST(GqaAttention, SameBitsAtAnyThreadCount) {
  const GqaShape s{2, cpu::kGqaTile + 9, 6, 2, 8};
  const Vec qkv = random_normals(s.qkv_size(), 29), dout = random_normals(s.out_size(), 30);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Result one = run_gqa(qkv, dout, s);
  omp_set_num_threads(3);
  const Result three = run_gqa(qkv, dout, s);
  omp_set_num_threads(threads);
  EXPECT_EQ(one.out, three.out);
  EXPECT_EQ(one.lse, three.lse);
  EXPECT_EQ(one.dqkv, three.dqkv);
}

TEST(GqaAttention, RefusesKeyValueHeadsThatDoNotDivideTheHeads) {
  Vec buffer(1024, 0.0f), out(1024), lse(64);
  EXPECT_THROW(cpu::gqa_attention_forward(out.data(), lse.data(), buffer.data(), 1, 2, 6, 4, 4),
               std::invalid_argument);
  EXPECT_THROW(cpu::gqa_attention_backward(buffer.data(), out.data(), buffer.data(), out.data(),
                                           lse.data(), 1, 2, 4, 0, 4),
               std::invalid_argument);
}

}  // namespace
