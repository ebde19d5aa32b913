// CudaBackend: device, stream, memory and the optimizer-side vector ops.
// The model's ops are in cuda_backend_ops.cpp.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "compute/cuda/cuda_backend.hpp"
#include "compute/cuda/device.hpp"
#include "compute/cuda/launch.hpp"

namespace trident {
namespace {

cudaStream_t create_stream(int device, const CudaSite& site) {
  cuda_check(cudaSetDevice(device), site, "cudaSetDevice");
  cudaStream_t s = nullptr;
  // Non-blocking: never serialised against the legacy default stream.
  cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), site, "cudaStreamCreate");
  return s;
}

std::string gib(std::size_t bytes) { return fmt::format("{:.2f} GiB", double(bytes) / (1ull << 30)); }

}  // namespace

CudaBackend::CudaBackend(const CudaBackendOptions& o)
    : Bf16Operands(static_cast<ComputeBackend&>(*this)),
      site_{o.rank, o.device},
      allow_tf32_(o.allow_tf32),
      stream_(create_stream(o.device, site_)),
      timer_(stream_, site_, o.time_kernels) {
  gemms_ = std::make_unique<Gemms>(stream_, allow_tf32_, site_);
}

CudaBackend::~CudaBackend() {
  // No throwing from here: errors at teardown are ignored.
  cudaStreamSynchronize(stream_);
  if (copy_stream_) cudaStreamSynchronize(copy_stream_), cudaStreamDestroy(copy_stream_);
  if (issued_) cudaEventDestroy(issued_);
  if (background_stream_) cudaStreamSynchronize(background_stream_), cudaStreamDestroy(background_stream_);
  if (background_after_) cudaEventDestroy(background_after_);
  gemms_.reset();
  if (scratch_) cudaFree(scratch_);
  for (void* w : widen_)
    if (w) cudaFree(w);
  if (adamw_plan_dev_) cudaFree(adamw_plan_dev_);
  cudaStreamDestroy(stream_);
}

namespace {

// Dense peak TFLOP/s by device name (NVIDIA's data sheets): 16-bit tensor
// cores, TF32 tensor cores, plain FP32. The first name the device's contains wins.
struct DevicePeak {
  const char* name;
  double bf16, tf32, fp32;
};
constexpr DevicePeak kDevicePeaks[] = {
    {"H100 PCIe", 756.0, 378.0, 51.2}, {"H100 NVL", 835.0, 417.5, 60.0},
    {"H100", 989.4, 494.7, 66.9},      {"H200", 989.4, 494.7, 66.9},
    {"GH200", 989.4, 494.7, 66.9},     {"A100", 312.0, 156.0, 19.5},
    {"A10", 125.0, 62.5, 31.2},        {"L40S", 362.0, 183.0, 91.6},
};

const DevicePeak* device_peak(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return nullptr;
  const std::string name = prop.name;
  for (const DevicePeak& p : kDevicePeaks)
    if (name.find(p.name) != std::string::npos) return &p;
  return nullptr;
}

}  // namespace

double CudaBackend::peak_flops(DType dtype) const {
  const DevicePeak* p = device_peak(site_.device);
  if (!p) return 0;
  const double tflops = dtype != DType::f32 ? p->bf16 : allow_tf32_ ? p->tf32 : p->fp32;
  return tflops * 1e12;
}

std::string CudaBackend::peak_source(DType /*dtype*/) const {
  const DevicePeak* p = device_peak(site_.device);
  return p ? fmt::format("{} data sheet, dense", p->name)
           : "device not in the peak table: set system.peak_tflops for MFU";
}

std::string CudaBackend::describe() const {
  int runtime = 0, driver = 0;
  cuda_check(cudaRuntimeGetVersion(&runtime), site_, "cudaRuntimeGetVersion");
  cuda_check(cudaDriverGetVersion(&driver), site_, "cudaDriverGetVersion");
  return fmt::format("cuda: device {} ({}), CUDA runtime {}.{}, driver {}.{}, {}", site_.device,
                     cuda_device_summary(site_.device), runtime / 1000, (runtime % 1000) / 10,
                     driver / 1000, (driver % 1000) / 10, gemms_->describe());
}

void* CudaBackend::allocate(std::size_t bytes) {
  void* p = nullptr;
  const std::size_t n = bytes ? bytes : 256;
  const cudaError_t e = cudaMalloc(&p, n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    std::size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    cuda_fail(site_, fmt::format("cudaMalloc of {}", gib(n)),
              fmt::format("{} ({} free of {}); lower train.micro_batch or raise zero.stage",
                          cudaGetErrorString(e), gib(free), gib(total)));
  }
  // Allocations start zeroed, as the CPU backend's do.
  cuda_check(cudaMemsetAsync(p, 0, n, stream_), site_, "cudaMemsetAsync (allocate)");
  return p;
}

void CudaBackend::release(void* p, std::size_t) {
  if (!p) return;
  cudaStreamSynchronize(stream_);  // queued work may still use it
  if (copy_stream_) cudaStreamSynchronize(copy_stream_);
  cudaFree(p);                     // not checked: release runs in destructors
}

void CudaBackend::pin_host(void* host, std::size_t bytes) {
  cuda_check(cudaHostRegister(host, bytes, cudaHostRegisterDefault), site_, "cudaHostRegister");
}

void CudaBackend::unpin_host(void* host, std::size_t) {
  cudaHostUnregister(host);  // not checked: runs in destructors
}

void CudaBackend::zero(void* p, std::size_t bytes) {
  run("zero", [&] { cuda_check(cudaMemsetAsync(p, 0, bytes, stream_), site_, "zero"); });
}

void CudaBackend::copy_to_host(void* host, const void* dev, std::size_t bytes) {
  run("copy_to_host", [&] {
    cuda_check(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream_), site_,
               "copy_to_host");
  });
  cuda_check(cudaStreamSynchronize(stream_), site_, "copy_to_host (synchronize)");
}

void CudaBackend::copy_from_host(void* dev, const void* host, std::size_t bytes) {
  run("copy_from_host", [&] {
    cuda_check(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream_), site_,
               "copy_from_host");
  });
  // From pageable memory the driver has taken its copy when the call returns;
  // from pinned memory it has not, so wait: the caller may reuse the buffer.
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, host) != cudaSuccess)
    cudaGetLastError();  // unregistered memory on an old driver: pageable
  else if (a.type == cudaMemoryTypeHost)
    cuda_check(cudaStreamSynchronize(stream_), site_, "copy_from_host (synchronize)");
}

cudaStream_t CudaBackend::copy_stream_after_compute() {
  if (!copy_stream_) {
    copy_stream_ = create_stream(site_.device, site_);
    cuda_check(cudaEventCreateWithFlags(&issued_, cudaEventDisableTiming), site_,
               "cudaEventCreate (copies)");
  }
  // The wait captures the event as recorded now; re-recording it later is safe.
  cuda_check(cudaEventRecord(issued_, stream_), site_, "cudaEventRecord (copies)");
  cuda_check(cudaStreamWaitEvent(copy_stream_, issued_, 0), site_, "cudaStreamWaitEvent (copies)");
  return copy_stream_;
}

void CudaBackend::copy_to_host_async(void* host, const void* dev, std::size_t bytes) {
  const cudaStream_t s = copy_stream_after_compute();
  cuda_check(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, s), site_,
             "copy_to_host_async");
}

void CudaBackend::copy_from_host_async(void* dev, const void* host, std::size_t bytes) {
  const cudaStream_t s = copy_stream_after_compute();
  cuda_check(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s), site_,
             "copy_from_host_async");
}

void CudaBackend::order_background_reads() {
  if (!background_stream_) {
    background_stream_ = create_stream(site_.device, site_);
    cuda_check(cudaEventCreateWithFlags(&background_after_, cudaEventDisableTiming), site_,
               "cudaEventCreate (background reads)");
  }
  cuda_check(cudaEventRecord(background_after_, stream_), site_, "cudaEventRecord (background)");
  cuda_check(cudaStreamWaitEvent(background_stream_, background_after_, 0), site_,
             "cudaStreamWaitEvent (background)");
}

void CudaBackend::copy_to_host_in_background(void* host, const void* dev, std::size_t bytes) {
  // The calling thread's current device is not inherited from the main thread.
  cuda_check(cudaSetDevice(site_.device), site_, "cudaSetDevice (background)");
  cuda_check(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, background_stream_), site_,
             "copy_to_host_in_background");
  cuda_check(cudaStreamSynchronize(background_stream_), site_,
             "copy_to_host_in_background (synchronize)");
}

void CudaBackend::wait_copies() {
  // Once the host has seen them finish, work it issues later follows them.
  if (copy_stream_) cuda_check(cudaStreamSynchronize(copy_stream_), site_, "wait_copies");
}

void CudaBackend::copy(void* dst, const void* src, std::size_t bytes) {
  run("copy", [&] {
    cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), site_, "copy");
  });
}

void CudaBackend::copy_2d(float* dst, std::size_t dst_ld, const float* src, std::size_t src_ld,
                          std::size_t rows, std::size_t cols) {
  run("copy_2d", [&] {
    cuda_check(cudaMemcpy2DAsync(dst, dst_ld * sizeof(float), src, src_ld * sizeof(float),
                                 cols * sizeof(float), rows, cudaMemcpyDeviceToDevice, stream_),
               site_, "copy_2d");
  });
}

int storage_kind(DType t) {
  return t == DType::bf16 ? gpu::kBF16 : t == DType::f16 ? gpu::kF16 : t == DType::f32 ? gpu::kF32 : -1;
}

void CudaBackend::convert(void* dst, DType dt, const void* src, DType st, std::size_t n) {
  if (dt == st) {
    copy(dst, src, n * dtype_size(st));
    return;
  }
  bool ok = true;
  run("convert", [&] { ok = gpu::convert(dst, storage_kind(dt), src, storage_kind(st), n, stream_); });
  if (!ok)
    throw std::invalid_argument(std::string("convert: ") + dtype_name(st) + " to " +
                                dtype_name(dt) + " is not supported");
}

void CudaBackend::round_to(float* x, DType t, std::size_t n) {
  run("round_to", [&] { gpu::round_to(x, storage_kind(t), n, stream_); });
}

void CudaBackend::round_to_bf16(float* dst, std::uint16_t* bits, const float* src,
                                std::size_t n) {
  run("round_to_bf16", [&] { gpu::round_to_bf16(dst, bits, src, n, stream_); });
}

void CudaBackend::synchronize() {
  cuda_check(cudaStreamSynchronize(stream_), site_, "synchronize");
}

void* CudaBackend::scratch(std::size_t bytes) {
  if (bytes <= scratch_bytes_) return scratch_;
  if (scratch_) {
    cuda_check(cudaStreamSynchronize(stream_), site_, "scratch (synchronize)");
    cuda_check(cudaFree(scratch_), site_, "cudaFree (scratch)");
    scratch_ = nullptr;
  }
  const std::size_t n = std::max(bytes, std::size_t(1) << 20);
  cuda_check(cudaMalloc(&scratch_, n), site_, "cudaMalloc (scratch)");
  scratch_bytes_ = n;
  return scratch_;
}

double CudaBackend::sum_squares(const float* x, std::size_t n) {
  double v = 0;
  sum_squares_each(&x, &n, 1, &v);
  return v;
}

void CudaBackend::sum_squares_each(const float* const* xs, const std::size_t* ns,
                                   std::size_t count, double* out) {
  if (!count) return;
  // The plan (chunks, each tensor's first chunk) goes over in one copy, then
  // the partials and results follow it in the scratch.
  std::size_t n_chunks = 0;
  for (std::size_t i = 0; i < count; ++i) n_chunks += gpu::sum_squares_chunk_count(ns[i]);
  const std::size_t chunk_bytes = n_chunks * sizeof(gpu::SumSquaresChunk);
  const std::size_t table_bytes =
      (chunk_bytes + (count + 1) * sizeof(unsigned) + sizeof(double) - 1) / sizeof(double) *
      sizeof(double);
  std::vector<unsigned char> table(table_bytes);
  auto* chunks = reinterpret_cast<gpu::SumSquaresChunk*>(table.data());
  auto* first = reinterpret_cast<unsigned*>(table.data() + chunk_bytes);
  gpu::sum_squares_plan(xs, ns, count, chunks, first);
  auto* s = static_cast<unsigned char*>(
      scratch(table_bytes + (n_chunks + count) * sizeof(double)));
  auto* partial = reinterpret_cast<double*>(s + table_bytes);
  double* results = partial + n_chunks;
  run("sum_squares", [&] {
    cuda_check(cudaMemcpyAsync(s, table.data(), table_bytes, cudaMemcpyHostToDevice, stream_),
               site_, "sum_squares (plan)");
    gpu::sum_squares_each(results, partial, reinterpret_cast<gpu::SumSquaresChunk*>(s),
                          n_chunks, reinterpret_cast<unsigned*>(s + chunk_bytes), count, stream_);
    cuda_check(cudaMemcpyAsync(out, results, count * sizeof(double), cudaMemcpyDeviceToHost,
                               stream_),
               site_, "sum_squares (copy)");
  });
  cuda_check(cudaStreamSynchronize(stream_), site_, "sum_squares (synchronize)");
}

void CudaBackend::scale(float* x, float s, std::size_t n) {
  run("scale", [&] { gpu::scale(x, s, n, stream_); });
}

void CudaBackend::add(float* out, const float* a, const float* b, std::size_t n) {
  run("add", [&] { gpu::add(out, a, b, n, stream_); });
}

std::unique_ptr<CudaBackend> make_cuda_backend(const CudaBackendOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

}  // namespace trident
