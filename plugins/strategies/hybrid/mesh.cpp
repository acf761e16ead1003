#include "mesh.hpp"

#include <string>

#include "tessera/base/error.hpp"

namespace tessera::hybrid {

Mesh::Mesh(int world_size, int tensor_parallel, int pipeline_parallel)
    : tp_(tensor_parallel), pp_(pipeline_parallel) {
  const std::string sizes =
      "[strategy.hybrid] tensor_parallel = " + std::to_string(tensor_parallel) +
      ", pipeline_parallel = " + std::to_string(pipeline_parallel);
  if (tensor_parallel < 1 || pipeline_parallel < 1 || world_size < 1) {
    throw ConfigError(sizes + " with a world of " + std::to_string(world_size) +
                      " ranks: every size must be at least 1");
  }
  if (world_size % (tensor_parallel * pipeline_parallel) != 0) {
    throw ConfigError(sizes + " need a world size that is a multiple of " +
                      std::to_string(tensor_parallel * pipeline_parallel) +
                      " (tensor_parallel x pipeline_parallel), but the world has " +
                      std::to_string(world_size) +
                      " ranks; change [runtime] world_size (-n) or the two options");
  }
  dp_ = world_size / (tensor_parallel * pipeline_parallel);
}

MeshCoordinates Mesh::coordinates(int world_rank) const {
  TESSERA_CHECK(world_rank >= 0 && world_rank < world_size(),
                "hybrid mesh: rank " + std::to_string(world_rank) + " is not in a world of " +
                    std::to_string(world_size()));
  return {world_rank % tp_, (world_rank / tp_) % dp_, world_rank / (tp_ * dp_)};
}

int Mesh::rank_of(MeshCoordinates at) const {
  TESSERA_CHECK(at.tensor >= 0 && at.tensor < tp_ && at.data >= 0 && at.data < dp_ &&
                    at.pipeline >= 0 && at.pipeline < pp_,
                "hybrid mesh: coordinates outside the mesh");
  return at.tensor + tp_ * (at.data + dp_ * at.pipeline);
}

std::vector<int> Mesh::tensor_group(int world_rank) const {
  auto at = coordinates(world_rank);
  std::vector<int> ranks;
  for (at.tensor = 0; at.tensor < tp_; ++at.tensor) ranks.push_back(rank_of(at));
  return ranks;
}

std::vector<int> Mesh::data_group(int world_rank) const {
  auto at = coordinates(world_rank);
  std::vector<int> ranks;
  for (at.data = 0; at.data < dp_; ++at.data) ranks.push_back(rank_of(at));
  return ranks;
}

std::vector<int> Mesh::pipeline_group(int world_rank) const {
  auto at = coordinates(world_rank);
  std::vector<int> ranks;
  for (at.pipeline = 0; at.pipeline < pp_; ++at.pipeline) ranks.push_back(rank_of(at));
  return ranks;
}

MeshGroups::MeshGroups(Communicator& world, const Mesh& mesh) : at(mesh.coordinates(world.rank())) {
  TESSERA_CHECK(world.size() == mesh.world_size(),
                "hybrid mesh: planned for " + std::to_string(mesh.world_size()) +
                    " ranks, the world has " + std::to_string(world.size()));
  // A group's color is the index of the group among its kind (the other two coordinates); the
  // key orders members by the coordinate that varies along it.
  tensor = world.split(at.data + mesh.data_size() * at.pipeline, at.tensor);
  data = world.split(at.tensor + mesh.tensor_size() * at.pipeline, at.data);
  pipeline = world.split(at.tensor + mesh.tensor_size() * at.data, at.pipeline);
  TESSERA_CHECK(tensor && data && pipeline && tensor->rank() == at.tensor &&
                    data->rank() == at.data && pipeline->rank() == at.pipeline,
                "hybrid mesh: split gave groups that do not match the mesh");
}

}  // namespace tessera::hybrid
