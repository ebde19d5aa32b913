#include "comm/mpi_communicator.hpp"

#include "comm/mpi_ops.hpp"

namespace trident {

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name)
    : Communicator(std::move(name)), comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  set_max_tag(mpi_ops::max_tag(comm_));
}

Request MpiCommunicator::iall_reduce(void* buf, std::size_t count, DType t, ReduceOp op) {
  return mpi_ops::all_reduce(comm_, begin_op(CommOp::all_reduce, count, t), buf, count, t, op);
}

Request MpiCommunicator::ireduce(void* buf, std::size_t count, DType t, ReduceOp op, int root) {
  return mpi_ops::reduce(comm_, begin_op(CommOp::reduce, count, t), buf, count, t, op, root);
}

Request MpiCommunicator::ireduce_scatter(const void* send, void* recv, std::size_t count,
                                         DType t, ReduceOp op) {
  return mpi_ops::reduce_scatter(comm_, begin_op(CommOp::reduce_scatter, count * size_, t), send,
                                 recv, count, t, op);
}

Request MpiCommunicator::iall_gather(const void* send, void* recv, std::size_t count, DType t) {
  return mpi_ops::all_gather(comm_, begin_op(CommOp::all_gather, count * size_, t), send, recv,
                             count, t);
}

Request MpiCommunicator::ibroadcast(void* buf, std::size_t count, DType t, int root) {
  return mpi_ops::broadcast(comm_, begin_op(CommOp::broadcast, count, t), buf, count, t, root);
}

Request MpiCommunicator::isend(const void* buf, std::size_t count, DType t, int peer, int tag) {
  return mpi_ops::send(comm_, begin_op(CommOp::send, count, t), buf, count, t, peer, tag);
}

Request MpiCommunicator::irecv(void* buf, std::size_t count, DType t, int peer, int tag) {
  return mpi_ops::recv(comm_, begin_op(CommOp::recv, count, t), buf, count, t, peer, tag);
}

bool MpiCommunicator::message_waiting(int peer, int tag) {
  return mpi_ops::message_waiting(comm_, peer, tag);
}

Request MpiCommunicator::ibarrier() {
  return mpi_ops::barrier(comm_, begin_op(CommOp::barrier, 0, DType::u8));
}

std::unique_ptr<Communicator> make_communicator(MPI_Comm comm, std::string name) {
  return std::make_unique<MpiCommunicator>(comm, std::move(name));
}

}  // namespace trident
