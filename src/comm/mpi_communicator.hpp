// MPI backend of the collectives seam: host buffers, non-blocking MPI calls.
#pragma once
#include <mpi.h>

#include <memory>

#include "comm/communicator.hpp"

namespace trident {

class MpiCommunicator final : public Communicator {
 public:
  // Does not take ownership of `comm` (the Grid owns its communicators).
  MpiCommunicator(MPI_Comm comm, std::string name);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MPI_Comm mpi_comm() const { return comm_; }

  Request iall_reduce(void* buf, std::size_t count, DType t, ReduceOp op) override;
  Request ireduce(void* buf, std::size_t count, DType t, ReduceOp op, int root) override;
  Request ireduce_scatter(const void* send, void* recv, std::size_t count, DType t,
                          ReduceOp op) override;
  Request iall_gather(const void* send, void* recv, std::size_t count, DType t) override;
  Request ibroadcast(void* buf, std::size_t count, DType t, int root) override;
  Request isend(const void* buf, std::size_t count, DType t, int peer, int tag) override;
  Request irecv(void* buf, std::size_t count, DType t, int peer, int tag) override;
  Request ibarrier() override;
  bool message_waiting(int peer, int tag) override;

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
};

// Makes the communicator of the configured backend for an MPI group.
std::unique_ptr<Communicator> make_communicator(MPI_Comm comm, std::string name);

}  // namespace trident
