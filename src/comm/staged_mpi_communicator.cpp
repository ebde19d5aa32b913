#include "comm/staged_mpi_communicator.hpp"

#include <fmt/format.h>

#include "comm/mpi_ops.hpp"
#include "core/error.hpp"

namespace trident {

struct StagedMpiCommunicator::Op {
  std::string what;
  char* host = nullptr;                  // pinned staging buffer; null for host-buffer ops
  cudaEvent_t copied_in = nullptr;       // device input is on the host
  cudaEvent_t copied_out = nullptr;      // result is back on the device
  Stage out;
  Issue issue;
  Request mpi;
  bool issued = false, mpi_done = false, finished = false;
};

namespace {

class StagedPending final : public PendingOp {
 public:
  StagedPending(StagedMpiCommunicator& c, std::shared_ptr<StagedMpiCommunicator::Op> op)
      : comm_(c), op_(std::move(op)) {
    what = op_->what;
  }
  // An operation dropped before it finished keeps its buffer: it stays in the
  // FIFO and MPI will still issue and complete it, as with a dropped MPI request.
  bool test() override { return comm_.progress(*op_); }

 private:
  StagedMpiCommunicator& comm_;
  std::shared_ptr<StagedMpiCommunicator::Op> op_;
};

}  // namespace

StagedMpiCommunicator::StagedMpiCommunicator(MPI_Comm comm, std::string name,
                                             CudaBackend& compute)
    : Communicator(std::move(name)),
      mpi_(comm),
      site_(compute.site()),
      compute_(compute.stream()),
      events_(compute.site()),
      pinned_(compute.site()) {
  MPI_Comm_rank(mpi_, &rank_);
  MPI_Comm_size(mpi_, &size_);
  set_max_tag(mpi_ops::max_tag(mpi_));
  const std::string what = fmt::format("staged set-up of the {} group", this->name());
  cuda_check(cudaStreamCreateWithFlags(&d2h_, cudaStreamNonBlocking), site_, what);
  cuda_check(cudaStreamCreateWithFlags(&h2d_, cudaStreamNonBlocking), site_, what);
}

StagedMpiCommunicator::~StagedMpiCommunicator() {
  unissued_.clear();
  for (cudaStream_t s : {d2h_, h2d_})
    if (s) cudaStreamDestroy(s);
  cudaGetLastError();
}

bool StagedMpiCommunicator::device_buffers(const void* a, const void* b,
                                           const std::string& what) const {
  const bool da = is_device_memory(a), db = b ? is_device_memory(b) : da;
  if (da != db)
    throw RuntimeFailure(what + ": one buffer is device memory and the other host memory");
  return da;
}

Request StagedMpiCommunicator::submit(std::string what, std::size_t host_bytes, Stage in,
                                      Stage out, Issue issue) {
  auto op = std::make_shared<Op>();
  op->what = std::move(what);
  op->issue = std::move(issue);
  op->out = out;
  if (in.dev || out.dev) op->host = pinned_.take(host_bytes);
  if (in.dev) {  // after the compute stream's work so far, copy the input out
    cudaEvent_t ready = events_.record(compute_, "record (staging after compute)");
    cuda_check(cudaStreamWaitEvent(d2h_, ready, 0), site_, op->what);
    events_.give(ready);
    cuda_check(cudaMemcpyAsync(op->host + in.host_offset, in.dev, in.bytes,
                               cudaMemcpyDeviceToHost, d2h_),
               site_, op->what);
    op->copied_in = events_.record(d2h_, "record (staged copy in)");
  } else if (out.dev) {
    // Nothing to copy in, but the result must not land before the compute
    // stream's earlier uses of the buffer: order the copy out after them.
    cudaEvent_t ready = events_.record(compute_, "record (staging after compute)");
    cuda_check(cudaStreamWaitEvent(h2d_, ready, 0), site_, op->what);
    events_.give(ready);
  }
  unissued_.push_back(op);
  advance();
  return Request(std::make_unique<StagedPending>(*this, op));
}

// Issues MPI for operations at the front of the FIFO whose input is on the host.
void StagedMpiCommunicator::advance() {
  while (!unissued_.empty()) {
    Op& f = *unissued_.front();
    if (f.copied_in && !events_.done(f.copied_in, f.what)) return;
    f.mpi = f.issue(f.host, f.what);
    f.issued = true;
    unissued_.pop_front();
  }
}

bool StagedMpiCommunicator::progress(Op& op) {
  if (op.finished) return true;
  advance();
  if (!op.issued) return false;
  if (!op.mpi_done) {
    if (!op.mpi.op()->test()) return false;
    op.mpi.reset();
    op.mpi_done = true;
    if (op.out.dev) {
      cuda_check(cudaMemcpyAsync(const_cast<void*>(op.out.dev), op.host + op.out.host_offset,
                                 op.out.bytes, cudaMemcpyHostToDevice, h2d_),
                 site_, op.what);
      op.copied_out = events_.record(h2d_, "record (staged copy out)");
    }
  }
  if (op.copied_out) {
    if (!events_.done(op.copied_out, op.what)) return false;
    cuda_check(cudaStreamWaitEvent(compute_, op.copied_out, 0), site_, op.what);
  }
  op.finished = true;
  release(op);
  return true;
}

void StagedMpiCommunicator::release(Op& op) {
  if (op.host) pinned_.give(op.host), op.host = nullptr;
  if (op.copied_in) events_.give(op.copied_in), op.copied_in = nullptr;
  if (op.copied_out) events_.give(op.copied_out), op.copied_out = nullptr;
}

Request StagedMpiCommunicator::iall_reduce(void* buf, std::size_t count, DType t, ReduceOp op) {
  std::string what = begin_op(CommOp::all_reduce, count, t);
  const MPI_Comm c = mpi_;
  if (!device_buffers(buf, nullptr, what))
    return submit(std::move(what), 0, {}, {}, [=](char*, std::string w) {
      return mpi_ops::all_reduce(c, std::move(w), buf, count, t, op);
    });
  const std::size_t bytes = count * dtype_size(t);
  return submit(std::move(what), bytes, {buf, bytes, 0}, {buf, bytes, 0},
                [=](char* h, std::string w) {
                  return mpi_ops::all_reduce(c, std::move(w), h, count, t, op);
                });
}

Request StagedMpiCommunicator::ireduce(void* buf, std::size_t count, DType t, ReduceOp op,
                                       int root) {
  std::string what = begin_op(CommOp::reduce, count, t);
  const MPI_Comm c = mpi_;
  if (!device_buffers(buf, nullptr, what))
    return submit(std::move(what), 0, {}, {}, [=](char*, std::string w) {
      return mpi_ops::reduce(c, std::move(w), buf, count, t, op, root);
    });
  const std::size_t bytes = count * dtype_size(t);
  const Stage out = rank_ == root ? Stage{buf, bytes, 0} : Stage{};  // others keep theirs
  return submit(std::move(what), bytes, {buf, bytes, 0}, out, [=](char* h, std::string w) {
    return mpi_ops::reduce(c, std::move(w), h, count, t, op, root);
  });
}

Request StagedMpiCommunicator::ireduce_scatter(const void* send, void* recv, std::size_t count,
                                               DType t, ReduceOp op) {
  std::string what = begin_op(CommOp::reduce_scatter, count * size_, t);
  const MPI_Comm c = mpi_;
  if (!device_buffers(send, recv, what))
    return submit(std::move(what), 0, {}, {}, [=](char*, std::string w) {
      return mpi_ops::reduce_scatter(c, std::move(w), send, recv, count, t, op);
    });
  const std::size_t block = count * dtype_size(t), all = block * size_;
  return submit(std::move(what), all + block, {send, all, 0}, {recv, block, all},
                [=](char* h, std::string w) {
                  return mpi_ops::reduce_scatter(c, std::move(w), h, h + all, count, t, op);
                });
}

Request StagedMpiCommunicator::iall_gather(const void* send, void* recv, std::size_t count,
                                           DType t) {
  std::string what = begin_op(CommOp::all_gather, count * size_, t);
  const MPI_Comm c = mpi_;
  if (!device_buffers(send, recv, what))
    return submit(std::move(what), 0, {}, {}, [=](char*, std::string w) {
      return mpi_ops::all_gather(c, std::move(w), send, recv, count, t);
    });
  const std::size_t block = count * dtype_size(t), own = block * rank_;
  // The input goes straight to this rank's block of the host buffer: in place.
  return submit(std::move(what), block * size_, {send, block, own}, {recv, block * size_, 0},
                [=](char* h, std::string w) {
                  return mpi_ops::all_gather(c, std::move(w), h + own, h, count, t);
                });
}

Request StagedMpiCommunicator::ibroadcast(void* buf, std::size_t count, DType t, int root) {
  std::string what = begin_op(CommOp::broadcast, count, t);
  const MPI_Comm c = mpi_;
  if (!device_buffers(buf, nullptr, what))
    return submit(std::move(what), 0, {}, {}, [=](char*, std::string w) {
      return mpi_ops::broadcast(c, std::move(w), buf, count, t, root);
    });
  const std::size_t bytes = count * dtype_size(t);
  const bool is_root = rank_ == root;
  return submit(std::move(what), bytes, is_root ? Stage{buf, bytes, 0} : Stage{},
                is_root ? Stage{} : Stage{buf, bytes, 0}, [=](char* h, std::string w) {
                  return mpi_ops::broadcast(c, std::move(w), h, count, t, root);
                });
}

Request StagedMpiCommunicator::isend(const void* buf, std::size_t count, DType t, int peer,
                                     int tag) {
  std::string what = begin_op(CommOp::send, count, t);
  const MPI_Comm c = mpi_;
  const bool dev = device_buffers(buf, nullptr, what);
  const std::size_t bytes = count * dtype_size(t);
  return submit(std::move(what), dev ? bytes : 0, dev ? Stage{buf, bytes, 0} : Stage{}, {},
                [=](char* h, std::string w) {
                  return mpi_ops::send(c, std::move(w), dev ? h : buf, count, t, peer, tag);
                });
}

Request StagedMpiCommunicator::irecv(void* buf, std::size_t count, DType t, int peer, int tag) {
  std::string what = begin_op(CommOp::recv, count, t);
  const MPI_Comm c = mpi_;
  const bool dev = device_buffers(buf, nullptr, what);
  const std::size_t bytes = count * dtype_size(t);
  return submit(std::move(what), dev ? bytes : 0, {}, dev ? Stage{buf, bytes, 0} : Stage{},
                [=](char* h, std::string w) {
                  return mpi_ops::recv(c, std::move(w), dev ? static_cast<void*>(h) : buf, count,
                                       t, peer, tag);
                });
}

Request StagedMpiCommunicator::ibarrier() {
  const MPI_Comm c = mpi_;
  return submit(begin_op(CommOp::barrier, 0, DType::u8), 0, {}, {},
                [=](char*, std::string w) { return mpi_ops::barrier(c, std::move(w)); });
}

std::unique_ptr<Communicator> make_staged_communicator(MPI_Comm comm, std::string name,
                                                       CudaBackend& compute) {
  return std::make_unique<StagedMpiCommunicator>(comm, std::move(name), compute);
}

}  // namespace trident
