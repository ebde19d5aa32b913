// The process grid: where this rank sits in tensor x context x data x pipeline space
// (its shape and coordinates: grid/grid_shape.hpp, free of MPI) and the
// communicator of each group. Made once in main and passed by reference;
// never global.
#pragma once
#include <mpi.h>

#include <array>
#include <functional>
#include <memory>
#include <string>

#include "comm/communicator.hpp"
#include "grid/grid_shape.hpp"

namespace trident {

class MpiWaitBoard;

// Makes the communicator of one group from its MPI communicator (not owned).
using CommunicatorFactory =
    std::function<std::unique_ptr<Communicator>(MPI_Comm comm, std::string name)>;

class Grid {
 public:
  // Collective over `parent`. Throws InputError if the shape does not use
  // exactly the ranks of `parent`.
  Grid(MPI_Comm parent, GridShape shape);
  ~Grid();
  Grid(const Grid&) = delete;
  Grid& operator=(const Grid&) = delete;

  const GridShape& shape() const { return shape_; }
  const GridCoord& coord() const { return coord_; }
  int rank() const { return rank_; }
  int size() const { return shape_.size(); }
  bool is_root() const { return rank_ == 0; }
  // Ranks of this job on this node, and this rank's index among them.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

  Communicator& world() { return *world_; }
  // All ranks over plain MPI on host memory, whatever use_communicators put
  // in the groups: parallel HDF5 and error agreement need an MPI_Comm.
  Communicator& host() { return *host_; }
  Communicator& data() { return *data_; }
  Communicator& tensor() { return *tensor_; }
  // The ranks that hold the parts of one sequence (ring attention's ring).
  Communicator& context() { return *context_; }
  // Data x context: the ranks holding the same weights, over which gradients
  // are reduced and ZeRO shards (Megatron's data-parallel group with context
  // parallelism). At cp 1 the data group's ranks, in the same order.
  Communicator& data_context() { return *data_context_; }
  Communicator& pipeline() { return *pipeline_; }
  // The pipeline group again, for gradients flowing back (and evaluation's
  // activations): a backend without tags (NCCL) pairs the messages between two
  // ranks in issue order, and a V placement sends activations and gradients
  // between one pair in an order its receiver does not share; per direction
  // every schedule's receives come in send order (validate_schedule).
  Communicator& pipeline_grads() { return *pipeline_grads_; }
  Communicator& model() { return *model_; }  // tensor x pipeline of one (data, context) replica
  // First and last pipeline stage of one (tensor, data) position: they share
  // the tied token embedding. Null on middle stages and without pipelining.
  Communicator* embedding() { return embedding_.get(); }

  // Replaces the groups' communicators (MPI, as made by the constructor) with
  // the factory's, e.g. NCCL once a device is chosen. Collective: every rank
  // calls it with the same kind of factory. Keeps the timeout.
  void use_communicators(const CommunicatorFactory& make);
  void set_timeout_seconds(double s);
  // "TP(2)-PP(2)-DP(2)-Rank(5)", with "-CP(2)" after TP where cp > 1.
  std::string describe() const;

 private:
  void make_communicators(const CommunicatorFactory& make);
  std::unique_ptr<MpiWaitBoard> board_;  // where each rank waits: named when a wait times out
  GridShape shape_;
  GridCoord coord_;
  int rank_ = 0;
  int local_rank_ = 0, local_size_ = 1;
  MPI_Comm host_comm_ = MPI_COMM_NULL, world_comm_ = MPI_COMM_NULL, data_comm_ = MPI_COMM_NULL,
           tensor_comm_ = MPI_COMM_NULL, pipeline_comm_ = MPI_COMM_NULL,
           pipeline_grads_comm_ = MPI_COMM_NULL, model_comm_ = MPI_COMM_NULL,
           embedding_comm_ = MPI_COMM_NULL, context_comm_ = MPI_COMM_NULL,
           data_context_comm_ = MPI_COMM_NULL;
  std::unique_ptr<Communicator> host_, world_, data_, tensor_, pipeline_, pipeline_grads_, model_,
      embedding_, context_, data_context_;
  // Every group's communicator but host_ (which use_communicators keeps).
  std::array<std::unique_ptr<Communicator>*, 9> groups();
};

}  // namespace trident
