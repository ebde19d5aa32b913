// The CUDA backend's one-launch and one-pass forms of ops against the calls
// they replace: AdamW over a table's spans in one launch (bit for bit against
// the CPU's span-by-span update), the bias gradient from bf16 bits (bit for
// bit against the same sums over the f32 values) and the cross-entropy's
// statistics in one pass (against the CPU's two passes, to fp32 rounding).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/half.hpp"
#include "compute/cpu/cpu_bf16_operands.hpp"
#include "gpu/gpu_test_support.hpp"

using namespace trident;
using namespace trident::testing;

namespace {

class CudaFused : public ::testing::Test {
 protected:
  std::unique_ptr<ComputeBackend> cpu = make_cpu_backend(1);
  cpu::CpuBf16Operands cpu16{*cpu};  // its bf16 path (bits widened where it has no bf16 kernels)
  std::unique_ptr<CudaBackend> gpu = make_test_gpu();
  DeviceArrays d{*gpu};
};

std::vector<std::uint16_t> download_bits(CudaBackend& gpu, const std::uint16_t* bits,
                                         std::size_t n) {
  std::vector<std::uint16_t> h(n);
  gpu.copy_to_host(h.data(), bits, n * sizeof(std::uint16_t));
  return h;
}

}  // namespace

// Spans of several sizes (one past a chunk, one tiny), decayed or not, with a
// gap between two of them that no span covers: the gap keeps its values.
TEST_F(CudaFused, AdamWSpansInOneLaunchEqualTheCpuSpanBySpan) {
  const std::vector<AdamWSpan> spans = {
      {0, 8192 + 5, true}, {8197, 3, false}, {8300, 20000, true}, {28300, 777, false}};
  const std::size_t n = 29077;
  auto p = random_vector(n, 60), m = std::vector<float>(n, 0.0f), v = m;
  float *gp = d.upload(p), *gm = d.upload(m), *gv = d.upload(v);
  std::vector<std::uint16_t> bits(n, 0x7fc1);
  std::uint16_t* gbits = d.upload(bits);
  for (int t = 1; t <= 3; ++t) {
    const auto g = random_vector(n, 61 + t, -0.1f, 0.1f);
    const float bc1 = 1.0f - std::pow(0.9f, float(t)), bc2 = 1.0f - std::pow(0.95f, float(t));
    const float clip = t == 2 ? 0.5f : 1.0f;
    cpu->adamw_spans(p.data(), g.data(), m.data(), v.data(), spans.data(), spans.size(), 1e-3f,
                     0.9f, 0.95f, 1e-8f, 0.1f, bc1, bc2, clip, bits.data());
    gpu->adamw_spans(gp, d.upload(g), gm, gv, spans.data(), spans.size(), 1e-3f, 0.9f, 0.95f,
                     1e-8f, 0.1f, bc1, bc2, clip, gbits);
  }
  EXPECT_EQ(float_bits(d.download(gp, n)), float_bits(p)) << "params";
  EXPECT_EQ(float_bits(d.download(gm, n)), float_bits(m)) << "first moment";
  EXPECT_EQ(float_bits(d.download(gv, n)), float_bits(v)) << "second moment";
  EXPECT_EQ(download_bits(*gpu, gbits, n), bits) << "bf16 weights";
  EXPECT_EQ(bits[8250], 0x7fc1) << "the gap between spans was written";
  // Each span as its own call: the same bits as the one launch.
  auto p1 = d.download(gp, n);
  float* gp1 = d.upload(p1);
  float *gm1 = d.upload(d.download(gm, n)), *gv1 = d.upload(d.download(gv, n));
  const float* gg = d.upload(random_vector(n, 70, -0.1f, 0.1f));
  gpu->adamw_spans(gp, gg, gm, gv, spans.data(), spans.size(), 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
                   0.5f, 0.5f, 1.0f, nullptr);
  for (const AdamWSpan& s : spans)
    gpu->adamw(gp1 + s.offset, gg + s.offset, gm1 + s.offset, gv1 + s.offset, s.n, 1e-3f, 0.9f,
               0.95f, 1e-8f, s.decay ? 0.1f : 0.0f, 0.5f, 0.5f, 1.0f, nullptr);
  EXPECT_EQ(float_bits(d.download(gp, n)), float_bits(d.download(gp1, n)));
}

// A linear's backward given dout as values and bits: the bias gradient is
// summed from the bits, in the same order, so it equals the one from values.
TEST_F(CudaFused, BiasGradientFromBitsEqualsTheOneFromValues) {
  const int N = 3000, IC = 64, OC = 300;
  auto dout = random_vector(std::size_t(N) * OC, 71);
  std::vector<std::uint16_t> dbits(dout.size());
  for (std::size_t i = 0; i < dout.size(); ++i) dout[i] = bf16_to_f32(dbits[i] = f32_to_bf16(dout[i]));
  auto x = random_vector(std::size_t(N) * IC, 72), w = random_vector(std::size_t(OC) * IC, 73);
  for (auto* a : {&x, &w})
    for (float& e : *a) e = bf16_to_f32(f32_to_bf16(e));
  const float *gdo = d.upload(dout), *gx = d.upload(x), *gw = d.upload(w);
  const std::uint16_t* gdb16 = d.upload(dbits);
  const auto bf16 = [](const float* v) { return MatrixIn(v).as_bf16_values(); };
  float *db_values = d.zeros(OC), *db_bits = d.zeros(OC);
  float *dw_values = d.zeros(w.size()), *dw_bits = d.zeros(w.size());
  // Values only and f32 operands: the f32 path, its bias from the values.
  gpu->matmul_backward(nullptr, dw_values, db_values, MatrixIn(gdo), gx, gw, N, IC, OC,
                       InputGrad::add);
  gpu->matmul_backward(nullptr, dw_bits, db_bits, MatrixIn(gdo, gdb16), bf16(gx), bf16(gw), N,
                       IC, OC, InputGrad::add);
  EXPECT_EQ(float_bits(d.download(db_bits, OC)), float_bits(d.download(db_values, OC)));
  std::vector<float> db_cpu(OC, 0.0f), dw_cpu(w.size(), 0.0f);
  cpu16.matmul_backward(nullptr, dw_cpu.data(), db_cpu.data(), dout.data(), x.data(), w.data(), N,
                       IC, OC, InputGrad::add);
  EXPECT_TRUE(matches_cpu(d.download(db_bits, OC), db_cpu)) << "bias gradient";
  EXPECT_TRUE(matches_cpu(d.download(dw_bits, w.size()), dw_cpu)) << "weight gradient";
}

// The statistics of a whole vocabulary in one pass: the row maxima exactly,
// the sums of exponentials to fp32 rounding, targets anywhere in the rows,
// rows whose maximum comes late (the rescaling) and a padded shard.
TEST_F(CudaFused, CrossEntropyStatisticsInOnePass) {
  const int N = 64, V = 4096, valid = 4000;
  std::mt19937_64 rng(74);
  std::vector<std::int32_t> tgt(N);
  for (auto& t : tgt) t = std::int32_t(rng() % valid);
  auto z = random_vector(std::size_t(N) * V, 75, -8, 8);
  for (int i = 0; i < N; i += 3)  // ascending rows: every element raises the maximum
    for (int j = 0; j < V; ++j) z[std::size_t(i) * V + j] = -8.0f + 16.0f * j / V;
  auto mx = nan_vector(N), packed = nan_vector(2 * N);
  cpu->xent_max(mx.data(), z.data(), N, V, valid);
  cpu->xent_sums(packed.data(), z.data(), mx.data(), tgt.data(), 0, N, V, valid);
  float *gz = d.upload(z), *gmx = d.poisoned(N), *gp = d.poisoned(2 * N);
  gpu->xent_stats(gmx, gp, gz, d.upload(tgt), N, V, valid);
  EXPECT_EQ(d.download(gmx, N), mx) << "row maxima";
  EXPECT_TRUE(matches_cpu(d.download(gp, 2 * N), packed)) << "sums and target logits";
  // The CPU's own one-pass form (the seam's default) is its two passes.
  auto mx2 = nan_vector(N), packed2 = nan_vector(2 * N);
  cpu->xent_stats(mx2.data(), packed2.data(), z.data(), tgt.data(), N, V, valid);
  EXPECT_EQ(float_bits(packed2), float_bits(packed));
}

// GELU's bits-only forward (neither its output nor its input written as
// values) and its backward from the input's bits: the same bits and
// gradient as the value passes.
TEST_F(CudaFused, GeluFromBitsAloneEqualsTheValuePasses) {
  const std::size_t n = 10001;
  const auto x = random_vector(n, 76, -5, 5), dy = random_vector(n, 77, -2, 2);
  auto bits = [&] { return d.upload(std::vector<std::uint16_t>(n, 0x7fc1)); };
  float *gx = d.upload(x), *gy = d.poisoned(n), *gdx = d.poisoned(n);
  std::uint16_t *yb = bits(), *xb = bits(), *db = bits();
  gpu->gelu_forward_rounded(gy, yb, gx, xb, n, DType::bf16);
  gpu->gelu_backward_rounded(gdx, db, gx, nullptr, d.upload(dy), n, DType::bf16);
  float *gx2 = d.upload(x), *stale = d.upload(std::vector<float>(n, 7.0f)), *gdx2 = d.poisoned(n);
  std::uint16_t *yb2 = bits(), *xb2 = bits(), *db2 = bits();
  gpu->gelu_forward_rounded(nullptr, yb2, gx2, xb2, n, DType::bf16);
  EXPECT_EQ(d.download(gx2, n), x) << "the input's values were written";
  EXPECT_EQ(download_bits(*gpu, yb2, n), download_bits(*gpu, yb, n)) << "output bits";
  EXPECT_EQ(download_bits(*gpu, xb2, n), download_bits(*gpu, xb, n)) << "input bits";
  gpu->gelu_backward_rounded(gdx2, db2, stale, xb2, d.upload(dy), n, DType::bf16);
  EXPECT_EQ(float_bits(d.download(gdx2, n)), float_bits(d.download(gdx, n))) << "gradient";
  EXPECT_EQ(download_bits(*gpu, db2, n), download_bits(*gpu, db, n)) << "gradient bits";
}

// A linear's output as bf16 bits straight from the GEMM (no f32 values): the
// CPU's product plus bias, rounded to bf16, to the rounding of a few elements
// (the two sum in different orders); and GELU reading those bits as its input
// gives the bits it gives from the values.
TEST_F(CudaFused, LinearOutputAsBitsFeedsGelu) {
  const int N = 512, IC = 256, OC = 384;
  auto bf16_values = [](std::vector<float> v) {
    for (float& e : v) e = bf16_to_f32(f32_to_bf16(e));
    return v;
  };
  const auto x = bf16_values(random_vector(std::size_t(N) * IC, 78));
  const auto w = bf16_values(random_vector(std::size_t(OC) * IC, 79));
  const auto b = bf16_values(random_vector(OC, 80));
  std::vector<float> want(std::size_t(N) * OC);
  cpu16.matmul_forward(want.data(), x.data(), w.data(), b.data(), N, IC, OC);
  for (float& e : want) e = bf16_to_f32(f32_to_bf16(e));
  const auto as_bf16 = [](const float* v) { return MatrixIn(v).as_bf16_values(); };
  const std::size_t n = want.size();
  std::uint16_t* bits = d.upload(std::vector<std::uint16_t>(n, 0x7fc1));
  float* scratch = d.poisoned(n);
  gpu->matmul_forward_rounded(scratch, bits, as_bf16(d.upload(x)), as_bf16(d.upload(w)),
                              d.upload(b), N, IC, OC, /*values=*/false);
  const auto got = download_bits(*gpu, bits, n);
  std::vector<float> widened(n);
  for (std::size_t i = 0; i < n; ++i) widened[i] = bf16_to_f32(got[i]);
  EXPECT_TRUE(matches_cpu(widened, want, 1e-3)) << "linear output bits";
  // GELU from those bits (input null) and from their values.
  std::uint16_t *from_bits = d.upload(std::vector<std::uint16_t>(n, 1)), *in_bits = d.upload(got);
  gpu->gelu_forward_rounded(nullptr, from_bits, nullptr, in_bits, n, DType::bf16);
  std::uint16_t *from_values = d.upload(std::vector<std::uint16_t>(n, 2)), *xb = d.upload(got);
  gpu->gelu_forward_rounded(nullptr, from_values, d.upload(widened), xb, n, DType::bf16);
  EXPECT_EQ(download_bits(*gpu, from_bits, n), download_bits(*gpu, from_values, n));
  EXPECT_EQ(download_bits(*gpu, in_bits, n), got) << "the input bits were written";
}
