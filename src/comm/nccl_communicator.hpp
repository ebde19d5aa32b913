// NCCL backend of the collectives seam, for device buffers. One NCCL
// communicator per MPI group, made from an ncclUniqueId that the group's rank
// 0 broadcasts over MPI. Collectives run on the communicator's own CUDA
// stream: each is ordered after the work already enqueued on the compute
// stream by an event (recorded there, waited on here), and its Request
// completes when an event recorded after it has fired (test() polls it with
// cudaEventQuery, so a bucket's all-reduce overlaps the rest of backward
// exactly as the MPI path does). On completion the compute stream is made to
// wait on that event, so later kernels see the result.
//
// Host buffers (a loss, a norm, error agreement) go to MPI on the same group.
// Sends and receives are queued and issued together as one NCCL group when
// one of them is first tested or any other operation is issued, so a rank may
// post isend and irecv to a peer doing the same without deadlock. A rank
// cannot send to itself. NCCL needs one GPU per rank: ranks sharing a GPU use
// the host-staged backend (staged_mpi_communicator.hpp).
#pragma once
#include <mpi.h>
#include <nccl.h>

#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/device_sync.hpp"
#include "compute/cuda/cuda_backend.hpp"

namespace trident {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `comm` (not owned); `compute` must outlive this object.
  NcclCommunicator(MPI_Comm comm, std::string name, CudaBackend& compute);
  ~NcclCommunicator() override;
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

  // Operations enqueued on the NCCL stream together; done fires after them.
  struct Batch {
    explicit Batch(EventPool& p) : pool(p) {}
    ~Batch() {
      if (done) pool.give(done);
    }
    EventPool& pool;
    cudaEvent_t done = nullptr;
  };
  bool poll(Batch& batch, const std::string& what);  // PendingOp::test of an NCCL op
  void flush() override { flush_p2p(); }

 private:
  using Launch = std::function<ncclResult_t()>;
  Request enqueue(std::string what, const Launch& launch);
  Request enqueue_p2p(std::string what, Launch launch);
  void flush_p2p();
  void wait_for_compute(const std::string& what);
  void check(ncclResult_t r, const std::string& what) const;
  bool device_buffers(const void* a, const void* b, const std::string& what) const;

  MPI_Comm mpi_;
  int rank_ = 0, size_ = 1;
  CudaSite site_;
  cudaStream_t compute_;
  cudaStream_t stream_ = nullptr;
  ncclComm_t nccl_ = nullptr;
  EventPool events_;
  std::vector<Launch> p2p_queue_;
  std::shared_ptr<Batch> p2p_batch_;
};

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, std::string name,
                                                     CudaBackend& compute);

}  // namespace trident
