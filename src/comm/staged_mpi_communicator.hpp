// Host-staged MPI backend of the collectives seam, for device buffers where
// NCCL is absent or cannot serve (several ranks sharing one GPU: NCCL refuses
// two ranks on one device). An operation copies its device input to a pinned
// host buffer (on a copy stream, after the work already on the compute
// stream), runs the MPI operation there, and copies the result back; the
// compute stream then waits for that copy. Non-blocking: test() moves an
// operation through these phases, so gradient buckets still overlap backward.
//
// MPI needs every rank to issue a group's collectives in one order. Each
// operation therefore enters a FIFO and its MPI call is issued only when it
// reaches the front with its input copied, so MPI sees program order on
// every rank. Host buffers go through the same FIFO, without copies.
#pragma once
#include <mpi.h>

#include <deque>
#include <functional>
#include <memory>

#include "comm/communicator.hpp"
#include "comm/device_sync.hpp"
#include "compute/cuda/cuda_backend.hpp"

namespace trident {

class StagedMpiCommunicator final : public Communicator {
 public:
  // Does not take ownership of `comm`; `compute` must outlive this object.
  StagedMpiCommunicator(MPI_Comm comm, std::string name, CudaBackend& compute);
  ~StagedMpiCommunicator() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Request iall_reduce(void* buf, std::size_t count, DType t, ReduceOp op) override;
  Request ireduce(void* buf, std::size_t count, DType t, ReduceOp op, int root) override;
  Request ireduce_scatter(const void* send, void* recv, std::size_t count, DType t,
                          ReduceOp op) override;
  Request iall_gather(const void* send, void* recv, std::size_t count, DType t) override;
  Request ibroadcast(void* buf, std::size_t count, DType t, int root) override;
  Request isend(const void* buf, std::size_t count, DType t, int peer, int tag) override;
  Request irecv(void* buf, std::size_t count, DType t, int peer, int tag) override;
  Request ibarrier() override;

  struct Op;
  bool progress(Op& op);  // PendingOp::test of a staged operation

 private:
  // A device range and where it sits in the operation's host buffer.
  struct Stage {
    const void* dev = nullptr;
    std::size_t bytes = 0, host_offset = 0;
  };
  // Issues the MPI operation on the host buffer (null for host-buffer ops).
  using Issue = std::function<Request(char* host, std::string what)>;
  Request submit(std::string what, std::size_t host_bytes, Stage in, Stage out, Issue issue);
  void advance();
  void release(Op& op);  // returns a finished operation's buffer and events to the pools
  bool device_buffers(const void* a, const void* b, const std::string& what) const;

  MPI_Comm mpi_;
  int rank_ = 0, size_ = 1;
  CudaSite site_;
  cudaStream_t compute_;
  cudaStream_t d2h_ = nullptr, h2d_ = nullptr;
  EventPool events_;
  PinnedPool pinned_;
  std::deque<std::shared_ptr<Op>> unissued_;
};

std::unique_ptr<Communicator> make_staged_communicator(MPI_Comm comm, std::string name,
                                                       CudaBackend& compute);

}  // namespace trident
