#include "comm/nccl_communicator.hpp"

#include <fmt/format.h>

#include "comm/mpi_ops.hpp"
#include "core/error.hpp"

namespace trident {
namespace {

ncclDataType_t to_nccl(DType t, bool reducing, const std::string& what) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
    case DType::u64: return ncclUint64;  // sums wrap modulo 2^64 (checksums)
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::u16:
      if (reducing) throw RuntimeFailure(what + ": NCCL cannot reduce u16");
      return ncclFloat16;  // any 2-byte type: moved bit for bit
  }
  return ncclUint8;
}

ncclRedOp_t to_nccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

class NcclPending final : public PendingOp {
 public:
  NcclPending(NcclCommunicator& c, std::shared_ptr<NcclCommunicator::Batch> b, std::string w)
      : comm_(c), batch_(std::move(b)) {
    what = std::move(w);
  }
  bool test() override { return comm_.poll(*batch_, what); }

 private:
  NcclCommunicator& comm_;
  std::shared_ptr<NcclCommunicator::Batch> batch_;
};

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm comm, std::string name, CudaBackend& compute)
    : Communicator(std::move(name)),
      mpi_(comm),
      site_(compute.site()),
      compute_(compute.stream()),
      events_(compute.site()) {
  MPI_Comm_rank(mpi_, &rank_);
  MPI_Comm_size(mpi_, &size_);
  set_max_tag(mpi_ops::max_tag(mpi_));  // host-buffer sends go through MPI
  const std::string what = fmt::format("NCCL set-up of the {} group", this->name());
  ncclUniqueId id{};
  if (rank_ == 0) check(ncclGetUniqueId(&id), what);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, mpi_);
  cuda_check(cudaSetDevice(site_.device), site_, what);
  check(ncclCommInitRank(&nccl_, size_, id, rank_), what);
  // The highest priority: a collective's kernels are scheduled ahead of the
  // compute kernels they overlap with.
  int least = 0, greatest = 0;
  cuda_check(cudaDeviceGetStreamPriorityRange(&least, &greatest), site_, what);
  cuda_check(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest), site_, what);
}

NcclCommunicator::~NcclCommunicator() {
  // An operation still running means the job is failing (a peer is gone):
  // abort rather than wait for it.
  const bool idle = p2p_queue_.empty() && stream_ && cudaStreamQuery(stream_) == cudaSuccess;
  if (nccl_) idle ? ncclCommDestroy(nccl_) : ncclCommAbort(nccl_);
  if (stream_) cudaStreamDestroy(stream_);
  cudaGetLastError();
}

void NcclCommunicator::check(ncclResult_t r, const std::string& what) const {
  if (r == ncclSuccess) return;
  const char* detail = nccl_ ? ncclGetLastError(nccl_) : nullptr;
  throw RuntimeFailure(fmt::format("{} failed on rank {} (CUDA device {}): NCCL {}{}{}", what,
                                   site_.rank, site_.device, ncclGetErrorString(r),
                                   detail && *detail ? ": " : "", detail ? detail : ""));
}

bool NcclCommunicator::device_buffers(const void* a, const void* b, const std::string& what) const {
  const bool da = is_device_memory(a), db = b ? is_device_memory(b) : da;
  if (da != db)
    throw RuntimeFailure(what + ": one buffer is device memory and the other host memory");
  return da;
}

void NcclCommunicator::wait_for_compute(const std::string& what) {
  cudaEvent_t ready = events_.record(compute_, "record (collective after compute)");
  cuda_check(cudaStreamWaitEvent(stream_, ready, 0), site_, what);
  events_.give(ready);  // the wait has captured it; re-recording it later is harmless
}

Request NcclCommunicator::enqueue(std::string what, const Launch& launch) {
  flush_p2p();  // keep the stream in program order
  auto batch = std::make_shared<Batch>(events_);
  wait_for_compute(what);
  check(launch(), what);
  batch->done = events_.record(stream_, "record (collective done)");
  return Request(std::make_unique<NcclPending>(*this, std::move(batch), std::move(what)));
}

Request NcclCommunicator::enqueue_p2p(std::string what, Launch launch) {
  if (!p2p_batch_) p2p_batch_ = std::make_shared<Batch>(events_);
  p2p_queue_.push_back(std::move(launch));
  return Request(std::make_unique<NcclPending>(*this, p2p_batch_, std::move(what)));
}

void NcclCommunicator::flush_p2p() {
  if (p2p_queue_.empty()) return;
  const std::string what = fmt::format("{} send/recv group of {}", name(), p2p_queue_.size());
  wait_for_compute(what);
  check(ncclGroupStart(), what);
  for (const Launch& l : p2p_queue_) check(l(), what);
  check(ncclGroupEnd(), what);
  p2p_batch_->done = events_.record(stream_, "record (send/recv done)");
  p2p_queue_.clear();
  p2p_batch_.reset();
}

bool NcclCommunicator::poll(Batch& batch, const std::string& what) {
  if (!batch.done) flush_p2p();  // a queued send/recv: issue its group now
  if (events_.done(batch.done, what)) {
    cuda_check(cudaStreamWaitEvent(compute_, batch.done, 0), site_, what);
    return true;
  }
  ncclResult_t async = ncclSuccess;
  check(ncclCommGetAsyncError(nccl_, &async), what);
  if (async != ncclSuccess && async != ncclInProgress) check(async, what);
  return false;
}

Request NcclCommunicator::iall_reduce(void* buf, std::size_t count, DType t, ReduceOp op) {
  std::string what = begin_op(CommOp::all_reduce, count, t);
  if (!device_buffers(buf, nullptr, what))
    return mpi_ops::all_reduce(mpi_, std::move(what), buf, count, t, op);
  const ncclDataType_t nt = to_nccl(t, true, what);
  return enqueue(std::move(what), [&] {
    return ncclAllReduce(buf, buf, count, nt, to_nccl(op), nccl_, stream_);
  });
}

Request NcclCommunicator::ireduce(void* buf, std::size_t count, DType t, ReduceOp op, int root) {
  std::string what = begin_op(CommOp::reduce, count, t);
  if (!device_buffers(buf, nullptr, what))
    return mpi_ops::reduce(mpi_, std::move(what), buf, count, t, op, root);
  const ncclDataType_t nt = to_nccl(t, true, what);
  return enqueue(std::move(what), [&] {
    return ncclReduce(buf, buf, count, nt, to_nccl(op), root, nccl_, stream_);
  });
}

Request NcclCommunicator::ireduce_scatter(const void* send, void* recv, std::size_t count,
                                          DType t, ReduceOp op) {
  std::string what = begin_op(CommOp::reduce_scatter, count * size_, t);
  if (!device_buffers(send, recv, what))
    return mpi_ops::reduce_scatter(mpi_, std::move(what), send, recv, count, t, op);
  const ncclDataType_t nt = to_nccl(t, true, what);
  return enqueue(std::move(what), [&] {
    return ncclReduceScatter(send, recv, count, nt, to_nccl(op), nccl_, stream_);
  });
}

Request NcclCommunicator::iall_gather(const void* send, void* recv, std::size_t count, DType t) {
  std::string what = begin_op(CommOp::all_gather, count * size_, t);
  if (!device_buffers(send, recv, what))
    return mpi_ops::all_gather(mpi_, std::move(what), send, recv, count, t);
  const ncclDataType_t nt = to_nccl(t, false, what);
  // NCCL treats send == recv + rank * count as in place, as the seam does.
  return enqueue(std::move(what),
                 [&] { return ncclAllGather(send, recv, count, nt, nccl_, stream_); });
}

Request NcclCommunicator::ibroadcast(void* buf, std::size_t count, DType t, int root) {
  std::string what = begin_op(CommOp::broadcast, count, t);
  if (!device_buffers(buf, nullptr, what))
    return mpi_ops::broadcast(mpi_, std::move(what), buf, count, t, root);
  const ncclDataType_t nt = to_nccl(t, false, what);
  return enqueue(std::move(what),
                 [&] { return ncclBroadcast(buf, buf, count, nt, root, nccl_, stream_); });
}

// NCCL has no tags: messages between a pair of ranks match in issue order.
Request NcclCommunicator::isend(const void* buf, std::size_t count, DType t, int peer, int tag) {
  std::string what = begin_op(CommOp::send, count, t);
  if (!device_buffers(buf, nullptr, what))
    return mpi_ops::send(mpi_, std::move(what), buf, count, t, peer, tag);
  const ncclDataType_t nt = to_nccl(t, false, what);
  return enqueue_p2p(std::move(what), [this, buf, count, nt, peer] {
    return ncclSend(buf, count, nt, peer, nccl_, stream_);
  });
}

Request NcclCommunicator::irecv(void* buf, std::size_t count, DType t, int peer, int tag) {
  std::string what = begin_op(CommOp::recv, count, t);
  if (!device_buffers(buf, nullptr, what))
    return mpi_ops::recv(mpi_, std::move(what), buf, count, t, peer, tag);
  const ncclDataType_t nt = to_nccl(t, false, what);
  return enqueue_p2p(std::move(what), [this, buf, count, nt, peer] {
    return ncclRecv(buf, count, nt, peer, nccl_, stream_);
  });
}

// NCCL has no barrier; MPI's on the same group is one.
Request NcclCommunicator::ibarrier() {
  return mpi_ops::barrier(mpi_, begin_op(CommOp::barrier, 0, DType::u8));
}

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, std::string name,
                                                     CudaBackend& compute) {
  return std::make_unique<NcclCommunicator>(comm, std::move(name), compute);
}

}  // namespace trident
