#include "gpu/collective_checks.hpp"

#include <chrono>

#include "core/timer.hpp"

namespace trident::testing {
namespace {

template <class T>
T* upload_as(ComputeBackend& be, const std::vector<T>& h, std::vector<void*>& own) {
  void* p = be.allocate(h.size() * sizeof(T));
  own.push_back(p);
  be.copy_from_host(p, h.data(), h.size() * sizeof(T));
  return static_cast<T*>(p);
}

template <class T>
std::vector<T> download_as(ComputeBackend& be, const T* d, std::size_t n) {
  std::vector<T> h(n);
  be.copy_to_host(h.data(), d, n * sizeof(T));
  return h;
}

}  // namespace

void check_collectives(Communicator& comm, CudaBackend& gpu) {
  DeviceArrays d(gpu);
  std::vector<void*> own;
  const int r = comm.rank(), P = comm.size();
  const std::size_t n = 1000;
  auto value = [](int rank, std::size_t i) { return float(rank + 1) * 0.5f + float(i % 7); };
  std::vector<float> mine(n);
  for (std::size_t i = 0; i < n; ++i) mine[i] = value(r, i);

  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
    float* x = d.upload(mine);
    comm.all_reduce(x, n, DType::f32, op);
    const auto got = d.download(x, n);
    for (std::size_t i = 0; i < n; ++i) {
      float want = op == ReduceOp::sum ? 0.0f : value(op == ReduceOp::max ? P - 1 : 0, i);
      if (op == ReduceOp::sum)
        for (int q = 0; q < P; ++q) want += value(q, i);
      ASSERT_EQ(got[i], want) << "all_reduce op " << int(op) << " element " << i;
    }
  }
  {  // f64 and i32 sums
    double* x64 = upload_as(gpu, std::vector<double>(n, r + 0.25), own);
    std::int32_t* x32 = upload_as(gpu, std::vector<std::int32_t>(n, r + 1), own);
    comm.all_reduce(x64, n, DType::f64, ReduceOp::sum);
    comm.all_reduce(x32, n, DType::i32, ReduceOp::sum);
    EXPECT_EQ(download_as(gpu, x64, n), std::vector<double>(n, P * (P - 1) / 2.0 + 0.25 * P));
    EXPECT_EQ(download_as(gpu, x32, n), std::vector<std::int32_t>(n, P * (P + 1) / 2));
  }
  {  // reduce to the last rank; the others keep their input
    const int root = P - 1;
    float* x = d.upload(mine);
    comm.reduce(x, n, DType::f32, ReduceOp::sum, root);
    const auto got = d.download(x, n);
    for (std::size_t i = 0; i < n; ++i) {
      float want = 0;
      for (int q = 0; q < P; ++q) want += value(q, i);
      ASSERT_EQ(got[i], r == root ? want : mine[i]) << "reduce element " << i;
    }
  }
  {  // reduce-scatter: block b of the sum to rank b
    std::vector<float> all(n * P);
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = value(r, i);
    float *x = d.upload(all), *y = d.poisoned(n);
    comm.reduce_scatter(x, y, n, DType::f32, ReduceOp::sum);
    const auto got = d.download(y, n);
    for (std::size_t i = 0; i < n; ++i) {
      float want = 0;
      for (int q = 0; q < P; ++q) want += value(q, r * n + i);
      ASSERT_EQ(got[i], want) << "reduce_scatter element " << i;
    }
  }
  for (bool in_place : {false, true}) {  // all-gather
    float* out = d.poisoned(n * P);
    float* in = in_place ? out + r * n : d.upload(mine);
    if (in_place) gpu.copy_from_host(in, mine.data(), n * sizeof(float));
    comm.all_gather(in, out, n, DType::f32);
    const auto got = d.download(out, n * P);
    for (int q = 0; q < P; ++q)
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(got[q * n + i], value(q, i)) << "all_gather in_place " << in_place;
  }
  {  // broadcast from rank 0
    float* x = d.upload(r == 0 ? mine : nan_vector(n));
    comm.broadcast(x, n, DType::f32, 0);
    const auto got = d.download(x, n);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], value(0, i)) << "broadcast";
  }
  if (P > 1) {  // a ring: send to the next rank, receive from the previous
    float *out = d.upload(mine), *in = d.poisoned(n);
    Request s = comm.isend(out, n, DType::f32, (r + 1) % P, 7);
    Request q = comm.irecv(in, n, DType::f32, (r + P - 1) % P, 7);
    comm.wait(q);
    comm.wait(s);
    const auto got = d.download(in, n);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], value((r + P - 1) % P, i)) << "ring";
  }
  comm.barrier();
  // Host buffers still work (a loss, a norm, error agreement use them).
  double h = r + 1.0;
  comm.all_reduce(&h, 1, DType::f64, ReduceOp::sum);
  EXPECT_EQ(h, P * (P + 1) / 2.0);
  EXPECT_EQ(comm.all_reduce_value(r, ReduceOp::max), P - 1);
  // Counters: calls and bytes as the seam defines them.
  comm.reset_stats();
  const std::uint64_t seq = comm.sequence();
  float* x = d.upload(mine);
  comm.all_reduce(x, n, DType::f32, ReduceOp::sum);
  comm.all_gather(x, d.poisoned(n * P), n, DType::f32);
  EXPECT_EQ(comm.sequence(), seq + 2);
  EXPECT_EQ(comm.stats().calls_of(CommOp::all_reduce), 1u);
  EXPECT_EQ(comm.stats().bytes_of(CommOp::all_reduce), n * sizeof(float));
  EXPECT_EQ(comm.stats().bytes_of(CommOp::all_gather), n * P * sizeof(float));
  for (void* p : own) gpu.release(p, 0);
}

void check_ordering_and_overlap(Communicator& comm, CudaBackend& gpu) {
  DeviceArrays d(gpu);
  const int P = comm.size();
  // Long compute first (a chain of GEMMs), then the bucket's final values.
  const int M = 2048;
  float *a = d.upload(random_vector(std::size_t(M) * M, 1, -0.01f, 0.01f));
  float *b = d.zeros(std::size_t(M) * M);
  const std::size_t n = 1 << 20;
  float* bucket = d.upload(std::vector<float>(n, 1.0f));
  // A first collective pays the library's one-time set-up: not timed here.
  comm.all_reduce(d.upload(std::vector<float>(16, 1.0f)), 16, DType::f32, ReduceOp::sum);
  gpu.synchronize();
  for (int i = 0; i < 40; ++i) gpu.matmul_forward(b, a, a, nullptr, M, M, M);
  gpu.scale(bucket, 3.0f, n);  // enqueued after the GEMMs: 3 on every rank
  const double t0 = now_seconds();
  Request req = comm.iall_reduce(bucket, n, DType::f32, ReduceOp::sum);
  const double issue_s = now_seconds() - t0;
  const bool done_at_once = comm.test(req);
  const bool compute_busy = cudaStreamQuery(gpu.stream()) == cudaErrorNotReady;
  // More compute while the reduction runs (as backward continues).
  for (int i = 0; i < 5; ++i) gpu.matmul_forward(b, a, a, nullptr, M, M, M);
  comm.wait(req);
  gpu.scale(bucket, 0.5f, n);  // the compute stream must see the reduced values
  const auto got = d.download(bucket, n);
  for (std::size_t i = 0; i < n; i += 4099) ASSERT_EQ(got[i], 1.5f * P) << "element " << i;
  EXPECT_LT(issue_s, 0.05) << "issuing a non-blocking all-reduce blocked the host";
  // Done while the GEMMs before it still run: it did not wait for them. (At
  // one rank the reduction is a copy; the values cannot tell the order.)
  EXPECT_FALSE(done_at_once && compute_busy)
      << "the all-reduce completed while the compute before it was still running";
  // Several buckets in flight at once, completed out of order.
  std::vector<float*> buckets;
  std::vector<Request> reqs;
  for (int k = 0; k < 4; ++k) {
    buckets.push_back(d.upload(std::vector<float>(4096, float(k + 1))));
    reqs.push_back(comm.iall_reduce(buckets.back(), 4096, DType::f32, ReduceOp::sum));
  }
  for (int k = 3; k >= 0; --k) comm.wait(reqs[k]);
  for (int k = 0; k < 4; ++k)
    EXPECT_EQ(d.download(buckets[k], 4096), std::vector<float>(4096, float((k + 1) * P)));
}

}  // namespace trident::testing
