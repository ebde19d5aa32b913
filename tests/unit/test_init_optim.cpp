// Initialisation (GPT-2 statistics, layout independence) and the optimizer
// pieces (AdamW against the formula, LR schedule, clipping).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "compute/adamw_math.hpp"
#include "compute/backend.hpp"
#include "memory/arena.hpp"
#include "model/gpt_params.hpp"
#include "model/param_table.hpp"
#include "optim/adamw.hpp"
#include "optim/clip.hpp"
#include "optim/lr_schedule.hpp"
#include "optim/step_snapshot.hpp"

using namespace trident;

TEST(Init, Gpt2StatisticsAndDeterminism) {
  GptConfig c{4, 64, 4, 32, 257};
  TensorTable t = build_gpt_param_table(c);
  std::vector<float> a(t.size()), b(t.size());
  init_gpt_params(t, a.data(), c, 42);
  init_gpt_params(t, b.data(), c, 42);
  EXPECT_EQ(a, b);
  // Piece by piece (a large model is never whole in f32), cuts anywhere: the same values.
  std::vector<float> pieces(t.size(), -1.0f);
  for (std::size_t first = 0; first < t.size(); first += 1000)
    init_gpt_params_range(t, pieces.data() + first, c, 42, first,
                          std::min<std::size_t>(1000, t.size() - first));
  EXPECT_EQ(a, pieces);
  auto stats = [&](const std::string& name) {
    const TensorInfo& ti = t.at(name);
    double s = 0, s2 = 0;
    for (std::size_t i = 0; i < ti.numel; ++i) s += a[ti.offset + i], s2 += a[ti.offset + i] * a[ti.offset + i];
    const double mean = s / ti.numel;
    return std::pair{mean, std::sqrt(s2 / ti.numel - mean * mean)};
  };
  // wte holds padding rows (vocab 257 -> 320): statistics over the real rows only.
  const TensorInfo& wte = t.at("wte");
  double s2 = 0;
  for (std::size_t i = 0; i < 257 * 64; ++i) s2 += a[wte.offset + i] * a[wte.offset + i];
  EXPECT_NEAR(std::sqrt(s2 / (257 * 64)), 0.02, 0.001);
  for (std::size_t i = 257 * 64; i < wte.numel; ++i) ASSERT_EQ(a[wte.offset + i], 0.0f);
  EXPECT_NEAR(stats("h.1.mlp.fc.w").second, 0.02, 0.001);
  EXPECT_NEAR(stats("h.1.attn.proj.w").second, 0.02 / std::sqrt(8.0), 0.0008);
  EXPECT_NEAR(stats("h.1.mlp.fc.w").first, 0.0, 0.001);
  EXPECT_EQ(stats("h.0.ln1.w").first, 1.0);
  EXPECT_EQ(stats("h.0.attn.qkv.b").first, 0.0);
  std::vector<float> other(t.size());
  init_gpt_params(t, other.data(), c, 43);
  EXPECT_NE(a, other);
}

TEST(Init, DoesNotDependOnTheTableAroundATensor) {
  // The same tensor gets the same values in a model of different depth: values
  // are keyed by name and global index, not by arena position.
  GptConfig small{2, 64, 4, 32, 257}, deep{6, 64, 4, 32, 257};
  TensorTable ts = build_gpt_param_table(small), td = build_gpt_param_table(deep);
  std::vector<float> a(ts.size()), b(td.size());
  init_gpt_params(ts, a.data(), small, 5);
  init_gpt_params(td, b.data(), deep, 5);
  const auto &x = ts.at("h.1.mlp.fc.w"), &y = td.at("h.1.mlp.fc.w");
  for (std::size_t i = 0; i < x.numel; ++i) ASSERT_EQ(a[x.offset + i], b[y.offset + i]);
}

TEST(TensorTable, ShardIndicesMapIntoTheGlobalTensorAndPaddingIsMarked) {
  // A [5, 3] tensor split along dim 0 into shards of 3 rows: shard 1 holds
  // global rows 3 and 4, and its third row is padding.
  TensorInfo rows{.name = "w", .shape = {3, 3}, .global_shape = {5, 3}, .split_dim = 0, .shard_rank = 1};
  EXPECT_EQ(rows.global_index(0), 9);
  EXPECT_EQ(rows.global_index(5), 14);
  EXPECT_EQ(rows.global_index(6), -1);
  // A [2, 4] tensor split along dim 1 into two [2, 2] shards.
  TensorInfo cols{.name = "w", .shape = {2, 2}, .global_shape = {2, 4}, .split_dim = 1, .shard_rank = 1};
  EXPECT_EQ(cols.global_index(0), 2);
  EXPECT_EQ(cols.global_index(1), 3);
  EXPECT_EQ(cols.global_index(2), 6);
  TensorInfo whole{.name = "b", .shape = {4}, .global_shape = {4}};
  EXPECT_EQ(whole.global_index(3), 3);
}

TEST(Init, AShardEqualsTheSliceOfTheGlobalTensor) {
  GptConfig c{2, 32, 4, 16, 257};
  TensorTable global = build_gpt_param_table(c);
  std::vector<float> g(global.size());
  init_gpt_params(global, g.data(), c, 9);
  const TensorInfo& fc = global.at("h.1.mlp.fc.w");  // [128, 32]
  for (int r = 0; r < 2; ++r) {
    TensorTable shard;
    shard.add({.name = "h.1.mlp.fc.w", .shape = {64, 32}, .global_shape = {128, 32}, .split_dim = 0,
               .shard_rank = r, .weight_decay = true});
    std::vector<float> s(shard.size());
    init_gpt_params(shard, s.data(), c, 9);
    for (std::size_t i = 0; i < 64 * 32; ++i) ASSERT_EQ(s[i], g[fc.offset + r * 64 * 32 + i]);
  }
}

TEST(Schedule, WarmupThenCosineToMin) {
  EXPECT_DOUBLE_EQ(lr_at(0, 100, 10, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(9, 100, 10, 1.0, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(10, 100, 10, 1.0, 0.1), 1.0);
  EXPECT_NEAR(lr_at(55, 100, 10, 1.0, 0.1), 0.55, 1e-12);  // half-way: mean of lr and min
  EXPECT_DOUBLE_EQ(lr_at(100, 100, 10, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(0, 10, 0, 2.0, 0.0), 2.0);
}

TEST(AdamW, MatchesTheFormulaAndDecaysOnlyMarkedTensors) {
  auto be = make_cpu_backend(1);
  MemoryLedger ledger;
  TensorTable t;
  t.add({.name = "w", .shape = {3}, .weight_decay = true});
  t.add({.name = "b", .shape = {2}, .weight_decay = false});
  Arena p(*be, ledger, MemCategory::parameters, t.size()), g(*be, ledger, MemCategory::gradients, t.size());
  const float p0[] = {0.5f, -1.0f, 2.0f}, g0[] = {0.1f, -0.2f, 0.3f};
  for (int i = 0; i < 3; ++i) p.f32(t.at("w"))[i] = p0[i], g.f32(t.at("w"))[i] = g0[i];
  for (int i = 0; i < 2; ++i) p.f32(t.at("b"))[i] = p0[i], g.f32(t.at("b"))[i] = g0[i];
  AdamWConfig cfg{0.9f, 0.95f, 1e-8f, 0.1f};
  AdamW opt(t, *be, ledger, cfg);
  EXPECT_EQ(ledger.current(MemCategory::optimizer), 2 * t.size() * sizeof(float));
  const double lr = 0.01;
  double m[3] = {}, v[3] = {}, pw[3] = {p0[0], p0[1], p0[2]}, pb[2] = {p0[0], p0[1]};
  for (int step = 1; step <= 3; ++step) {
    opt.step(p, g, float(lr));
    const double bc1 = 1 - std::pow(0.9, step), bc2 = 1 - std::pow(0.95, step);
    for (int i = 0; i < 3; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g0[i];
      v[i] = 0.95 * v[i] + 0.05 * g0[i] * g0[i];
      const double upd = lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + 1e-8);
      pw[i] = pw[i] * (1 - lr * 0.1) - upd;
      if (i < 2) pb[i] = pb[i] - upd;
    }
  }
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(p.f32(t.at("w"))[i], pw[i], 1e-6);
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(p.f32(t.at("b"))[i], pb[i], 1e-6);
}

// The clipping factor and the bf16 weights come out of the update's own pass
// with the bits of the separate passes (scale the gradients, update, round).
TEST(AdamW, FusedScaleAndBf16WeightsEqualSeparatePasses) {
  auto be = make_cpu_backend(0);
  const std::size_t n = 100003;  // several threads' parts and a tail
  std::vector<float> p(n), g(n), m(n, 0.01f), v(n, 0.02f);
  for (std::size_t i = 0; i < n; ++i)
    p[i] = std::sin(0.37f * float(i)), g[i] = 0.1f * std::cos(0.11f * float(i));
  auto p2 = p, g2 = g, m2 = m, v2 = v;
  std::vector<std::uint16_t> fused(n), separate(n);
  be->adamw(p.data(), g.data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.19f,
            0.0975f, 0.37f, fused.data());
  be->scale(g2.data(), 0.37f, n);
  be->adamw(p2.data(), g2.data(), m2.data(), v2.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
            0.19f, 0.0975f, 1.0f, nullptr);
  be->convert(separate.data(), DType::bf16, p2.data(), DType::f32, n);
  EXPECT_EQ(p, p2);
  EXPECT_EQ(m, m2);
  EXPECT_EQ(v, v2);
  EXPECT_EQ(fused, separate);
}

// The CPU's update is the written-out arithmetic of compute/adamw_math.hpp,
// every element, in its vectorised clone too: the CUDA kernel computes the
// same (tests/gpu), so ZeRO-Offload's host update equals the device's.
TEST(AdamW, ComputesTheWrittenOutOperationsExactly) {
  auto be = make_cpu_backend(0);
  const std::size_t n = 100003;
  std::vector<float> p(n), g(n), m(n), v(n);
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = std::sin(0.37f * float(i)), g[i] = 0.1f * std::cos(0.11f * float(i));
    m[i] = 0.01f * std::sin(0.05f * float(i)), v[i] = 1e-4f * (1.5f + std::cos(0.07f * float(i)));
  }
  const float lr = 3e-4f, wd = 0.1f, bc1 = 0.19f, bc2 = 0.0975f, scale = 0.37f;
  const AdamWScalars a = adamw_scalars(lr, 0.9f, 0.95f, 1e-8f, wd, bc1, bc2, scale);
  auto rp = p, rm = m, rv = v;
  for (std::size_t i = 0; i < n; ++i) {  // one rounding per operation, as written
    const float gi = g[i] * a.grad_scale;
    const float decayed = rp[i] * a.decay;
    const float scaled_g = a.one_minus_beta1 * gi;
    rm[i] = std::fma(a.beta1, rm[i], scaled_g);
    const float scaled_g2 = a.one_minus_beta2 * gi;
    const float g2 = scaled_g2 * gi;
    rv[i] = std::fma(a.beta2, rv[i], g2);
    const float num = a.step * rm[i];
    const float denom = std::fma(std::sqrt(rv[i]), a.inv_sqrt_bc2, a.eps);
    const float update = num / denom;
    rp[i] = decayed - update;
  }
  be->adamw(p.data(), g.data(), m.data(), v.data(), n, lr, 0.9f, 0.95f, 1e-8f, wd, bc1, bc2,
            scale, nullptr);
  EXPECT_EQ(m, rm);
  EXPECT_EQ(v, rv);
  EXPECT_EQ(p, rp);
}

// Post-validation's undo: a step taken ahead with the unclipped coefficient,
// undone from the copy and redone clipped, leaves weights (bf16 and their f32
// masters), moments and step count as the clipped step alone does, bit for
// bit; the copy costs the weights, both moments and the masters once more.
TEST(StepSnapshot, UndoneAndRedoneStepEqualsTheDirectOne) {
  auto be = make_cpu_backend(0);
  MemoryLedger ledger;
  TensorTable t;
  t.add({.name = "w", .shape = {1000}, .weight_decay = true});
  t.add({.name = "b", .shape = {37}, .weight_decay = false});
  AdamWConfig cfg{0.9f, 0.95f, 1e-8f, 0.1f, DType::bf16, DType::f32};
  struct Run {
    Arena p, g;
    AdamW opt;
  };
  auto make_run = [&] {
    Run r{Arena(*be, ledger, MemCategory::parameters, t.size(), DType::bf16),
          Arena(*be, ledger, MemCategory::gradients, t.size()), AdamW(t, *be, ledger, cfg)};
    std::vector<float> init(t.size());
    for (std::size_t i = 0; i < t.size(); ++i)
      init[i] = std::sin(0.3f * float(i)), r.g.f32()[i] = 0.2f * std::cos(0.7f * float(i));
    r.opt.init_masters(0, init.data(), t.size());
    r.opt.refresh_weights(r.p);
    r.opt.step(r.p, r.g, 1e-3f);  // moments and a step count to restore
    return r;
  };
  Run direct = make_run(), ahead = make_run();
  const std::size_t before = ledger.current(MemCategory::optimizer);
  StepSnapshot undo(*be, ledger, {&ahead.p, &ahead.opt.first_moment(),
                                  &ahead.opt.second_moment(), ahead.opt.masters(), nullptr});
  EXPECT_EQ(undo.bytes(), t.size() * (2 + 3 * sizeof(float)));
  EXPECT_EQ(ledger.current(MemCategory::optimizer) - before, undo.bytes());
  const float clipped = clip_coefficient(3.0, 1.0);
  direct.opt.step(direct.p, direct.g, 1e-3f, clipped);
  undo.save(ahead.opt.steps_taken());
  ahead.opt.step(ahead.p, ahead.g, 1e-3f, clip_coefficient(0.0, 0.0));
  EXPECT_NE(std::memcmp(ahead.p.data(), direct.p.data(), ahead.p.bytes()), 0);
  ahead.opt.set_steps_taken(undo.restore());
  ahead.opt.step(ahead.p, ahead.g, 1e-3f, clipped);
  for (auto [x, y] : {std::pair{&ahead.p, &direct.p}, {&ahead.g, &direct.g},
                      {&ahead.opt.first_moment(), &direct.opt.first_moment()},
                      {&ahead.opt.second_moment(), &direct.opt.second_moment()},
                      {ahead.opt.masters(), direct.opt.masters()}})
    EXPECT_EQ(std::memcmp(x->data(), y->data(), x->bytes()), 0);
  EXPECT_EQ(ahead.opt.steps_taken(), 2);
}

// The undo copy taken in pieces while receives wait (parts of any size,
// across the arenas) restores what a whole copy does; a copy dropped half
// way starts over, so sources changed since its first part are copied anew.
TEST(StepSnapshot, CopyInPartsEqualsWholeAndDroppedPartStartsOver) {
  auto be = make_cpu_backend(0);
  MemoryLedger ledger;
  Arena a(*be, ledger, MemCategory::parameters, 1000), b(*be, ledger, MemCategory::parameters, 37);
  auto fill = [&](float base) {
    for (std::size_t i = 0; i < a.numel(); ++i) a.f32()[i] = base + float(i);
    for (std::size_t i = 0; i < b.numel(); ++i) b.f32()[i] = -base - float(i);
  };
  StepSnapshot undo(*be, ledger, {&a, &b});
  fill(1.0f);
  undo.save_part(5, 3 * sizeof(float));  // begun, then dropped: the sources change
  undo.drop_part();
  fill(2.0f);
  const std::vector<float> want_a(a.f32(), a.f32() + a.numel()), want_b(b.f32(), b.f32() + b.numel());
  int parts = 0;
  while (!undo.save_part(7, 333)) ++parts;  // 333 bytes: not a multiple of an element
  EXPECT_EQ(parts, int((a.bytes() + b.bytes()) / 333));
  fill(9.0f);
  EXPECT_EQ(undo.restore(), 7);
  EXPECT_EQ(std::memcmp(a.data(), want_a.data(), a.bytes()), 0);
  EXPECT_EQ(std::memcmp(b.data(), want_b.data(), b.bytes()), 0);
  fill(3.0f);  // the next whole save starts at the beginning
  undo.save(8);
  fill(4.0f);
  undo.restore();
  EXPECT_EQ(a.f32()[0], 3.0f);
  EXPECT_EQ(b.f32()[36], -3.0f - 36.0f);
}

TEST(Clip, ScalesOnlyAboveTheThreshold) {
  // Gradients (3, 4): sum of squares 25, no group to sum over.
  const GradNorm n = reduce_grad_norm(25.0, false, {});
  EXPECT_DOUBLE_EQ(n.norm, 5.0);
  EXPECT_TRUE(n.finite);
  EXPECT_EQ(clip_coefficient(n.norm, 10.0), 1.0f);
  EXPECT_EQ(clip_coefficient(n.norm, 0.0), 1.0f);  // clipping off
  const float coef = clip_coefficient(n.norm, 1.0);
  EXPECT_NEAR(coef, 1.0 / (5.0 + 1e-6), 1e-7);
}

TEST(Clip, LossScaleIsDividedOutOfNormAndCoefficient) {
  // fp16: gradients stored times 1024; the norm and the clip rule see the true ones.
  const GradNorm n = reduce_grad_norm(25.0 * 1024 * 1024, false, {}, 1024.0);
  EXPECT_DOUBLE_EQ(n.norm, 5.0);
  EXPECT_FLOAT_EQ(clip_coefficient(n.norm, 10.0, 1024.0), 1.0f / 1024);
  EXPECT_NEAR(clip_coefficient(n.norm, 1.0, 1024.0), 1.0 / (5.0 + 1e-6) / 1024, 1e-10);
}

TEST(Clip, AnyNonFiniteGradientMarksTheNorm) {
  EXPECT_FALSE(reduce_grad_norm(1.0, true, {}).finite);  // held but not counted
  EXPECT_FALSE(reduce_grad_norm(INFINITY, false, {}).finite);
  EXPECT_FALSE(reduce_grad_norm(NAN, false, {}).finite);
}
