// CPU backend of the compute seam: oneDNN GEMMs and OpenMP loops.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <vector>

#include <sys/mman.h>

#include "compute/backend.hpp"
#include "compute/cpu/amx_gemm.hpp"
#include "compute/cpu/blas.hpp"
#include "compute/cpu/cpu_bf16_operands.hpp"
#include "compute/cpu/cpu_llama_ops.hpp"
#include "compute/cpu/cpu_peak.hpp"
#include "compute/cpu/gemm_bf16.hpp"
#include "compute/cpu/gemm_library.hpp"
#include "compute/cpu/half_convert.hpp"
#include "compute/cpu/kernel_scratch.hpp"
#include "compute/cpu/kernels.hpp"
#include "compute/cpu/linear.hpp"
#include "compute/cpu/vector_ops.hpp"
#include "core/half.hpp"

namespace trident {
namespace {

constexpr std::size_t kAlignment = 64, kHugePage = std::size_t(2) << 20;

// Large ranges are zeroed by every thread, a contiguous share each: the first
// touch of fresh pages (which the kernel clears on the fault) and the step's
// gradient zeroing run at the node's memory speed, not one core's.
void zero_bytes(void* p, std::size_t bytes) {
  constexpr std::size_t kPiece = std::size_t(1) << 20;
  if (bytes < 2 * kPiece || omp_in_parallel()) return (void)std::memset(p, 0, bytes);
  const std::int64_t pieces = std::int64_t((bytes + kPiece - 1) / kPiece);
  char* c = static_cast<char*>(p);
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < pieces; ++i) {
    const std::size_t at = std::size_t(i) * kPiece;
    std::memset(c + at, 0, std::min(kPiece, bytes - at));
  }
}

class CpuBackend final : public ComputeBackend, public BackendInfo {
 public:
  explicit CpuBackend(int threads) : bf16_(*this), llama_(cpu::make_cpu_llama_ops()) {
    if (threads <= 0) threads = omp_get_max_threads();
    omp_set_num_threads(threads);  // oneDNN runs its GEMMs on this OpenMP pool
    threads_ = threads;
    peak_ = detect_cpu_peak();
  }
  // The ISA's f32 figure at the reported clock, or what FMA chains in
  // registers measurably reach when that is more (a VM reports its nominal
  // clock, not its turbo): no GEMM can beat either. bf16 runs' linears run
  // bf16 kernels (gemm_bf16.hpp): with AMX their peak is the tile unit's,
  // 1024 FLOP a cycle at the reported clock or as measured back to back,
  // whichever is more; elsewhere at least what such a GEMM measurably
  // reaches. fp16 values are computed in f32.
  double peak_flops(DType dtype) const override {
    if (measured_ < 0) measured_ = measure_fma_flops(peak_, threads_);
    const double f32 = std::max(peak_.flops_per_core * threads_, measured_);
    if (dtype != DType::bf16) return f32;
    if (measured_bf16_ < 0)
      measured_bf16_ = cpu::amx_available()
                           ? threads_ * std::max(1024 * peak_.ghz * 1e9, cpu::amx_tile_flops())
                           : measure_bf16_gemm_flops();
    return std::max(f32, measured_bf16_);
  }
  std::string warning() const override {
    return gemm_kernel_mismatch(gemm_kernel_lanes(), gemm_library_description(), peak_.isa);
  }
  std::string peak_source(DType dtype) const override {
    const double isa = peak_.flops_per_core * threads_, f32 = peak_flops(DType::f32);
    if (peak_flops(dtype) > f32 && cpu::amx_available())
      return fmt::format("AMX tiles: {} threads x the tile unit's bf16 products back to back "
                         "({:.0f} GFLOP/s each)", threads_, peak_flops(dtype) / threads_ / 1e9);
    if (peak_flops(dtype) > f32)
      return fmt::format("a measured {}-thread GEMM on bf16 kernels: above the f32 peak of {:.0f} "
                         "GFLOP/s", threads_, f32 / 1e9);
    if (f32 > isa)
      return fmt::format("{} x 2 FMA units x {} thread{}, measured back to back: {:.2f} GHz, "
                         "above the reported {:.2f}", peak_.isa, threads_,
                         threads_ > 1 ? "s" : "", peak_.ghz * f32 / isa, peak_.ghz);
    return fmt::format("{} x 2 FMA units at {:.2f} GHz x {} threads, an upper bound", peak_.isa,
                       peak_.ghz, threads_);
  }
  BackendInfo& info() override { return *this; }
  Bf16Operands* bf16_operands() override {
    return cpu::cpu_has_bf16_kernels() ? &bf16_ : nullptr;
  }
  LlamaOps& llama_ops() override { return *llama_; }
  std::string name() const override { return "cpu"; }
  std::string describe() const override {
    return fmt::format("cpu: {} OpenMP threads, GEMMs on {}{}", threads_,
                       gemm_library_description(),
                       cpu::amx_available() ? ", bf16 GEMMs on AMX tiles (amx_gemm)" : "");
  }

  // Arenas of 2 MiB and more ask for transparent huge pages (an advice the
  // kernel ignores where THP is off): the GEMMs and loops that stream them
  // then miss the TLB far less (perf/RESULTS.md: 6-10% on bf16 GEMMs).
  void* allocate(std::size_t bytes) override {
    const std::size_t align = bytes >= kHugePage ? kHugePage : kAlignment;
    const std::size_t rounded = std::max(align, (bytes + align - 1) / align * align);
    void* p = std::aligned_alloc(align, rounded);
    if (!p) throw std::bad_alloc();
    if (align == kHugePage) madvise(p, rounded, MADV_HUGEPAGE);
    zero_bytes(p, rounded);  // first touch by the owning rank's threads
    return p;
  }
  void release(void* p, std::size_t) override { std::free(p); }
  std::size_t kernel_scratch_peak() const override { return cpu::kernel_scratch_peak(); }
  void zero(void* p, std::size_t bytes) override { zero_bytes(p, bytes); }
  void copy_to_host(void* h, const void* d, std::size_t n) override { std::memcpy(h, d, n); }
  void copy_from_host(void* d, const void* h, std::size_t n) override { std::memcpy(d, h, n); }
  void copy(void* d, const void* s, std::size_t n) override { std::memcpy(d, s, n); }
  void copy_2d(float* d, std::size_t d_ld, const float* s, std::size_t s_ld, std::size_t rows,
               std::size_t cols) override {
#pragma omp parallel for
    for (std::int64_t r = 0; r < std::int64_t(rows); ++r)
      std::memcpy(d + r * d_ld, s + r * s_ld, cols * sizeof(float));
  }
  void synchronize() override {}
  void convert(void* dst, DType dt, const void* src, DType st, std::size_t n) override {
    const bool to16 = st == DType::f32 && (dt == DType::bf16 || dt == DType::f16);
    const bool from16 = dt == DType::f32 && (st == DType::bf16 || st == DType::f16);
    if (st == dt) {
      std::memcpy(dst, src, n * dtype_size(st));
    } else if (to16) {
      cpu::to_16bit(static_cast<std::uint16_t*>(dst), static_cast<const float*>(src), n, dt);
    } else if (from16) {
      cpu::from_16bit(static_cast<float*>(dst), static_cast<const std::uint16_t*>(src), n, st);
    } else {
      throw std::invalid_argument(fmt::format("convert: {} to {} is not supported",
                                              dtype_name(st), dtype_name(dt)));
    }
  }
  void round_to(float* x, DType t, std::size_t n) override {
    if (t != DType::f32) cpu::round_to_16bit(x, n, t);
  }

  void embedding_forward(float* out, const std::int32_t* tok, const float* wte, int lo, int count,
                         int N, int C) override {
    cpu::embedding_forward(out, tok, wte, lo, count, N, C);
  }
  void embedding_backward(float* dwte, const float* dout, const std::int32_t* tok, int lo,
                          int count, int N, int C) override {
    cpu::embedding_backward(dwte, dout, tok, lo, count, N, C);
  }
  void position_forward(float* out, const float* wpe, int N, int T, int first, int C) override {
    cpu::position_forward(out, wpe, N, T, first, C);
  }
  void position_backward(float* dwpe, const float* dout, int N, int T, int first,
                         int C) override {
    cpu::position_backward(dwpe, dout, N, T, first, C);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                         const float* b, int N, int C) override {
    cpu::layernorm_forward(out, mean, rstd, inp, w, b, N, C);
  }
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                          const float* w, const float* mean, const float* rstd, int N,
                          int C) override {
    cpu::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  }
  void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int N,
                      int IC, int OC) override {
    cpu::linear_forward(out, inp, w, bias, N, IC, OC);
  }
  void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                       const float* w, int N, int IC, int OC, InputGrad dinp_mode) override {
    cpu::linear_backward(dinp, dw, dbias, dout, inp, w, N, IC, OC, dinp_mode);
  }
  void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C,
                         int NH) override {
    cpu::attention_forward(out, lse, qkv, B, T, C, NH);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                          const float* lse, int B, int T, int C, int NH) override {
    cpu::attention_backward(dqkv, dout, qkv, out, lse, B, T, C, NH);
  }
  void gelu_forward(float* out, const float* inp, std::size_t n) override {
    cpu::gelu_forward(out, inp, n);
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n) override {
    cpu::gelu_backward(dinp, inp, dout, n);
  }
  void add(float* out, const float* a, const float* b, std::size_t n) override {
    cpu::add(out, a, b, n);
  }
  void xent_max(float* row_max, const float* logits, int N, int V, int valid) override {
    cpu::xent_max(row_max, logits, N, V, valid);
  }
  void xent_sums(float* packed, const float* logits, const float* row_max,
                 const std::int32_t* targets, int lo, int N, int V, int valid) override {
    cpu::xent_sums(packed, logits, row_max, targets, lo, N, V, valid);
  }
  void xent_finish(float* losses, float* dlogits, const float* logits, const float* row_max,
                   const float* packed, const std::int32_t* targets, int lo, int N, int V,
                   int valid, float dloss) override {
    cpu::xent_finish(losses, dlogits, logits, row_max, packed, targets, lo, N, V, valid, dloss);
  }

  double sum_squares(const float* x, std::size_t n) override { return cpu::sum_squares(x, n); }
  void scale(float* x, float s, std::size_t n) override { cpu::scale(x, s, n); }
  void adamw_spans(float* p, const float* g, float* m, float* v, const AdamWSpan* spans,
                   std::size_t count, float lr, float beta1, float beta2, float eps, float wd,
                   float bc1, float bc2, float grad_scale, std::uint16_t* weights_bf16) override {
    for (std::size_t i = 0; i < count; ++i) {
      const std::size_t o = spans[i].offset;
      cpu::adamw(p + o, g + o, m + o, v + o, spans[i].n, lr, beta1, beta2, eps,
                 spans[i].decay ? wd : 0.0f, bc1, bc2, grad_scale,
                 weights_bf16 ? weights_bf16 + o : nullptr);
    }
  }

 private:
  cpu::CpuBf16Operands bf16_;
  std::unique_ptr<LlamaOps> llama_;
  int threads_ = 1;
  CpuPeak peak_;
  mutable double measured_ = -1;       // FLOP/s of FMA chains, measured on first use
  mutable double measured_bf16_ = -1;  // the bf16 kernels' peak; 0 without them

  // The fastest of five rounds of 512^3 GEMMs on this rank's threads on the
  // bf16 kernels (the operands hold bf16 values); 0 without such kernels.
  double measure_bf16_gemm_flops() const {
    const int n = 512;
    std::vector<float> a(std::size_t(n) * n, 0.5f), w(a.size(), 0.25f), out(a.size());
    auto gemm = [&] {
      return cpu::gemm_bf16_valued(false, true, n, n, n, 1.0f, a.data(), n, w.data(), n, 0.0f,
                                   out.data(), n);
    };
    if (!gemm()) return 0;  // warm up
    double best = 1e30;
    for (int round = 0; round < 5; ++round) {
      const auto t0 = std::chrono::steady_clock::now();
      gemm();
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
      best = std::min(best, took.count());
    }
    return 2.0 * n * n * n / best;
  }
};

}  // namespace

std::unique_ptr<ComputeBackend> make_cpu_backend(int threads) {
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace trident
