#include "grid/grid.hpp"

#include <fmt/format.h>

#include "comm/mpi_communicator.hpp"
#include "comm/wait_board.hpp"
#include "core/error.hpp"

namespace trident {

Grid::Grid(MPI_Comm parent, GridShape shape) : shape_(shape) {
  int world_size = 0;
  MPI_Comm_size(parent, &world_size);
  MPI_Comm_rank(parent, &rank_);
  if (shape.tp < 1 || shape.dp < 1 || shape.pp < 1 || shape.size() != world_size) {
    throw InputError(fmt::format(
        "[parallel] dp * tp * pp = {} * {} * {} = {} but the job has {} ranks; "
        "launch {} ranks or change the layout",
        shape.dp, shape.tp, shape.pp, shape.size(), world_size, shape.size()));
  }
  coord_ = grid_coord_of(shape_, rank_);
  const auto& c = coord_;
  MPI_Comm_dup(parent, &host_comm_);
  MPI_Comm_dup(parent, &world_comm_);
  // Each group is the grid with one axis (or two, for model) left free.
  MPI_Comm_split(parent, c.dp + shape.dp * c.pp, c.tp, &tensor_comm_);
  MPI_Comm_split(parent, c.tp + shape.tp * c.pp, c.dp, &data_comm_);
  MPI_Comm_split(parent, c.tp + shape.tp * c.dp, c.pp, &pipeline_comm_);
  MPI_Comm_dup(pipeline_comm_, &pipeline_grads_comm_);
  MPI_Comm_split(parent, c.dp, c.tp + shape.tp * c.pp, &model_comm_);
  const bool ends = shape.pp > 1 && (c.pp == 0 || c.pp == shape.pp - 1);
  MPI_Comm_split(parent, ends ? c.tp + shape.tp * c.dp : MPI_UNDEFINED, c.pp, &embedding_comm_);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(parent, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank_);
  MPI_Comm_size(node, &local_size_);
  MPI_Comm_free(&node);
  board_ = std::make_unique<MpiWaitBoard>(parent);
  host_ = make_communicator(host_comm_, "host");
  host_->set_wait_observer(board_.get());
  make_communicators(make_communicator);
}

void Grid::make_communicators(const CommunicatorFactory& make) {
  world_ = make(world_comm_, "world");
  tensor_ = make(tensor_comm_, "tensor");
  data_ = make(data_comm_, "data");
  pipeline_ = make(pipeline_comm_, "pipeline");
  pipeline_grads_ = make(pipeline_grads_comm_, "pipeline-grads");
  model_ = make(model_comm_, "model");
  if (embedding_comm_ != MPI_COMM_NULL) embedding_ = make(embedding_comm_, "embedding");
  for (auto* c : groups())
    if (*c) (*c)->set_wait_observer(board_.get());
}

std::array<std::unique_ptr<Communicator>*, 7> Grid::groups() {
  return {&world_, &tensor_, &data_, &pipeline_, &pipeline_grads_, &model_, &embedding_};
}

void Grid::use_communicators(const CommunicatorFactory& make) {
  const double timeout = world_->timeout_seconds();
  for (auto* c : groups()) c->reset();
  make_communicators(make);
  set_timeout_seconds(timeout);
}

Grid::~Grid() {
  host_.reset();
  for (auto* c : groups()) c->reset();
  for (MPI_Comm* c : {&host_comm_, &world_comm_, &tensor_comm_, &data_comm_, &pipeline_comm_,
                      &pipeline_grads_comm_, &model_comm_, &embedding_comm_})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

void Grid::set_timeout_seconds(double s) {
  host_->set_timeout_seconds(s);
  for (auto* c : groups())
    if (*c) (*c)->set_timeout_seconds(s);
}

std::string Grid::describe() const {
  return fmt::format("TP({})-PP({})-DP({})-Rank({})", shape_.tp, shape_.pp, shape_.dp, rank_);
}

}  // namespace trident
