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
  if (shape.tp < 1 || shape.dp < 1 || shape.pp < 1 || shape.cp < 1 ||
      shape.size() != world_size) {
    const std::string product =
        shape.cp == 1 ? fmt::format("dp * tp * pp = {} * {} * {}", shape.dp, shape.tp, shape.pp)
                      : fmt::format("dp * tp * cp * pp = {} * {} * {} * {}", shape.dp, shape.tp,
                                    shape.cp, shape.pp);
    throw InputError(fmt::format(
        "[parallel] {} = {} but the job has {} ranks; launch {} ranks or change the layout",
        product, shape.size(), world_size, shape.size()));
  }
  coord_ = grid_coord_of(shape_, rank_);
  const auto& c = coord_;
  MPI_Comm_dup(parent, &host_comm_);
  MPI_Comm_dup(parent, &world_comm_);
  // Each group is the grid with one axis (or two: model, data x context)
  // left free; the colour numbers the other axes, the key orders the free one.
  const int TP = shape.tp, CP = shape.cp, DP = shape.dp;
  MPI_Comm_split(parent, c.cp + CP * (c.dp + DP * c.pp), c.tp, &tensor_comm_);
  MPI_Comm_split(parent, c.tp + TP * (c.dp + DP * c.pp), c.cp, &context_comm_);
  MPI_Comm_split(parent, c.tp + TP * (c.cp + CP * c.pp), c.dp, &data_comm_);
  MPI_Comm_split(parent, c.tp + TP * c.pp, c.replica(shape), &data_context_comm_);
  MPI_Comm_split(parent, c.tp + TP * (c.cp + CP * c.dp), c.pp, &pipeline_comm_);
  MPI_Comm_dup(pipeline_comm_, &pipeline_grads_comm_);
  MPI_Comm_split(parent, c.replica(shape), c.tp + TP * c.pp, &model_comm_);
  const bool ends = shape.pp > 1 && (c.pp == 0 || c.pp == shape.pp - 1);
  MPI_Comm_split(parent, ends ? c.tp + TP * (c.cp + CP * c.dp) : MPI_UNDEFINED, c.pp,
                 &embedding_comm_);
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
  context_ = make(context_comm_, "context");
  // At cp 1 the data group's ranks: named as it, so messages read as before.
  data_context_ = make(data_context_comm_, shape_.cp > 1 ? "data-context" : "data");
  if (embedding_comm_ != MPI_COMM_NULL) embedding_ = make(embedding_comm_, "embedding");
  for (auto* c : groups())
    if (*c) (*c)->set_wait_observer(board_.get());
}

std::array<std::unique_ptr<Communicator>*, 9> Grid::groups() {
  return {&world_,          &tensor_, &data_,      &pipeline_,    &pipeline_grads_,
          &model_,          &embedding_, &context_, &data_context_};
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
                      &pipeline_grads_comm_, &model_comm_, &embedding_comm_, &context_comm_,
                      &data_context_comm_})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

void Grid::set_timeout_seconds(double s) {
  host_->set_timeout_seconds(s);
  for (auto* c : groups())
    if (*c) (*c)->set_timeout_seconds(s);
}

std::string Grid::describe() const {
  const std::string cp = shape_.cp > 1 ? fmt::format("-CP({})", shape_.cp) : "";
  return fmt::format("TP({}){}-PP({})-DP({})-Rank({})", shape_.tp, cp, shape_.pp, shape_.dp, rank_);
}

}  // namespace trident
