// One GEMM benchmark, compiled once per library (USE_BLIS, USE_DNNL, else
// OpenBLAS) by perf/gemm_libraries.sh: the three GEMMs of a linear layer
// (y = x W^T, dx = dy W, dW = dy^T x, row-major) on the shapes of the decks,
// best of five, and the worst error against a double-precision dot product.
//   usage: gemm_<library> THREADS
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#if defined(USE_BLIS)
#include <blis.h>
static const char* kName = "blis";
static void gemm(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B,
                 int ldb, float* C, int ldc) {
  float one = 1, zero = 0;
  bli_sgemm(ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, M, N,
            K, &one, const_cast<float*>(A), lda, 1, const_cast<float*>(B), ldb, 1, &zero, C, ldc,
            1);
}
#elif defined(USE_DNNL)
#include <dnnl.h>
static const char* kName = "onednn";
static void gemm(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B,
                 int ldb, float* C, int ldc) {
  dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.f, A, lda, B, ldb, 0.f, C, ldc);
}
#else
#include <cblas.h>
static const char* kName = "openblas";
static void gemm(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B,
                 int ldb, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, 1.f, A, lda, B, ldb, 0.f, C, ldc);
}
#endif

namespace {

struct Shape {
  int tokens, in, out;
};

double seconds(const std::chrono::steady_clock::time_point& t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  omp_set_num_threads(threads);
#if defined(USE_BLIS)
  bli_thread_set_num_threads(threads);
#endif
  // The default deck (4 x 128 tokens, d 128), d 512 at T 256, d 768 at T 512 with
  // GPT-2's vocabulary.
  const Shape shapes[] = {{512, 128, 384},   {512, 128, 512},    {512, 512, 128},
                          {512, 128, 257},   {1024, 512, 1536},  {1024, 512, 2048},
                          {1024, 2048, 512}, {1024, 512, 257},   {2048, 768, 2304},
                          {2048, 768, 3072}, {2048, 3072, 768},  {2048, 768, 50304}};
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0, 1);
  double total_s = 0, total_flops = 0, worst = 0;
  std::printf("%-9s threads %d\n%6s %5s %5s %9s %9s %9s  (GFLOP/s)\n", kName, threads, "tokens",
              "in", "out", "x W^T", "dy W", "dy^T x");
  for (const Shape& s : shapes) {
    std::vector<float> x(std::size_t(s.tokens) * s.in), w(std::size_t(s.out) * s.in);
    std::vector<float> y(std::size_t(s.tokens) * s.out), dx(x.size()), dw(w.size());
    for (auto& v : x) v = normal(rng);
    for (auto& v : w) v = normal(rng);
    gemm(false, true, s.tokens, s.out, s.in, x.data(), s.in, w.data(), s.in, y.data(), s.out);
    for (int probe = 0; probe < 50; ++probe) {
      const int i = int(rng() % s.tokens), j = int(rng() % s.out);
      double ref = 0;
      for (int k = 0; k < s.in; ++k)
        ref += double(x[std::size_t(i) * s.in + k]) * w[std::size_t(j) * s.in + k];
      worst = std::max(worst, std::fabs(ref - y[std::size_t(i) * s.out + j]) / std::sqrt(s.in));
    }
    double best[3] = {1e30, 1e30, 1e30};
    for (int round = 0; round < 5; ++round) {
      auto t0 = std::chrono::steady_clock::now();
      gemm(false, true, s.tokens, s.out, s.in, x.data(), s.in, w.data(), s.in, y.data(), s.out);
      best[0] = std::min(best[0], seconds(t0));
      t0 = std::chrono::steady_clock::now();
      gemm(false, false, s.tokens, s.in, s.out, y.data(), s.out, w.data(), s.in, dx.data(), s.in);
      best[1] = std::min(best[1], seconds(t0));
      t0 = std::chrono::steady_clock::now();
      gemm(true, false, s.out, s.in, s.tokens, y.data(), s.out, x.data(), s.in, dw.data(), s.in);
      best[2] = std::min(best[2], seconds(t0));
    }
    const double flops = 2.0 * s.tokens * s.in * s.out;
    std::printf("%6d %5d %5d %9.1f %9.1f %9.1f\n", s.tokens, s.in, s.out, flops / best[0] / 1e9,
                flops / best[1] / 1e9, flops / best[2] / 1e9);
    total_s += best[0] + best[1] + best[2];
    total_flops += 3 * flops;
  }
  std::printf("%-9s threads %d: all shapes %.1f GFLOP/s, worst error %.1e (per sqrt(K))\n", kName,
              threads, total_flops / total_s / 1e9, worst);
}
