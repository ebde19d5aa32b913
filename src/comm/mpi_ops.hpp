// The MPI calls behind collectives on host buffers, as free functions of
// (MPI communicator, the op's description, buffers). MpiCommunicator is made
// of them; the device-buffer communicators use them for host buffers and for
// their host-staged copies. Each returns a Request whose test() drives MPI.
#pragma once
#include <mpi.h>

#include <string>

#include "comm/communicator.hpp"

namespace trident::mpi_ops {

Request all_reduce(MPI_Comm c, std::string what, void* buf, std::size_t count, DType t,
                   ReduceOp op);
// In place at the root; other ranks' buffers are left unchanged.
Request reduce(MPI_Comm c, std::string what, void* buf, std::size_t count, DType t, ReduceOp op,
               int root);
// Block r of send (count elements each) from every rank, reduced in rank
// order into rank r's recv; recv may be this rank's block of send.
Request reduce_scatter(MPI_Comm c, std::string what, const void* send, void* recv,
                       std::size_t count, DType t, ReduceOp op);
// send == this rank's block of recv means in place.
Request all_gather(MPI_Comm c, std::string what, const void* send, void* recv, std::size_t count,
                   DType t);
Request broadcast(MPI_Comm c, std::string what, void* buf, std::size_t count, DType t, int root);
Request send(MPI_Comm c, std::string what, const void* buf, std::size_t count, DType t, int peer,
             int tag);
// MPI_Iprobe: a matching message has arrived and waits for its receive.
bool message_waiting(MPI_Comm c, int peer, int tag);
Request recv(MPI_Comm c, std::string what, void* buf, std::size_t count, DType t, int peer,
             int tag);
Request barrier(MPI_Comm c, std::string what);
// The largest tag callers may use: one below the largest the MPI library
// accepts (MPI_TAG_UB: 2^31 - 1 in Open MPI, far less in some MPICH builds;
// the standard promises only 32767), which reduce_scatter's exchange keeps.
int max_tag(MPI_Comm c);

}  // namespace trident::mpi_ops
