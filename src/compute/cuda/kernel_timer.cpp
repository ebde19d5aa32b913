#include "compute/cuda/kernel_timer.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace trident {
namespace {
constexpr std::size_t kResolveEvery = 4096;  // marks kept before a batch is resolved
}

KernelTimer::KernelTimer(cudaStream_t stream, const CudaSite& site, bool enabled)
    : stream_(stream), site_(site), enabled_(enabled) {}

KernelTimer::~KernelTimer() {
  for (auto& m : marks_) free_.push_back(m.start), free_.push_back(m.stop);
  if (open_start_) free_.push_back(open_start_);
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

cudaEvent_t KernelTimer::take() {
  if (!free_.empty()) {
    cudaEvent_t e = free_.back();
    free_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  cuda_check(cudaEventCreate(&e), site_, "cudaEventCreate (kernel timer)");
  return e;
}

void KernelTimer::begin(const char* op) {
  if (!enabled_) return;
  open_ = op;
  open_start_ = take();
  cuda_check(cudaEventRecord(open_start_, stream_), site_, op);
}

void KernelTimer::end() {
  if (!enabled_ || !open_) return;
  cudaEvent_t stop = take();
  cuda_check(cudaEventRecord(stop, stream_), site_, open_);
  marks_.push_back(Mark{open_, open_start_, stop});
  open_ = nullptr;
  open_start_ = nullptr;
  if (marks_.size() >= kResolveEvery) resolve();
}

void KernelTimer::resolve() {
  for (const Mark& m : marks_) {
    cuda_check(cudaEventSynchronize(m.stop), site_, "kernel timer");
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, m.start, m.stop), site_, "kernel timer");
    Total& t = totals_[m.op];
    t.calls += 1;
    t.ms += ms;
    free_.push_back(m.start);
    free_.push_back(m.stop);
  }
  marks_.clear();
}

void KernelTimer::reset() {
  if (!enabled_) return;
  resolve();
  totals_.clear();
}

std::string KernelTimer::report() {
  if (!enabled_) return {};
  resolve();
  std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  double all = 0;
  for (const auto& r : rows) all += r.second.ms;
  std::string out = fmt::format("{:<22} {:>9} {:>12} {:>11} {:>7}\n", "device time per op",
                                "calls", "total ms", "mean us", "share");
  for (const auto& [op, t] : rows)
    out += fmt::format("{:<22} {:>9} {:>12.2f} {:>11.1f} {:>6.1f}%\n", op, t.calls, t.ms,
                       1e3 * t.ms / double(t.calls), all > 0 ? 100 * t.ms / all : 0.0);
  out += fmt::format("{:<22} {:>9} {:>12.2f}\n", "total", "", all);
  return out;
}

}  // namespace trident
