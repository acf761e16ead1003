#pragma once
// The 3-D mesh of the hybrid strategy: world = tensor x data x pipeline ranks, ordered
// tensor-innermost, then data, then pipeline (Megatron's order, so that the ranks of a tensor
// group are neighbours and, with ranks numbered host by host, share a host):
//
//   world rank = tensor_rank + tp * (data_rank + dp * pipeline_rank)
//
// Mesh is the pure arithmetic; MeshGroups splits the world into the three groups.

#include <memory>
#include <vector>

#include "tessera/plugin/communicator.hpp"

namespace tessera::hybrid {

struct MeshCoordinates {
  int tensor = 0;
  int data = 0;
  int pipeline = 0;
  friend bool operator==(const MeshCoordinates&, const MeshCoordinates&) = default;
};

// Immutable value; thread-safe to read.
class Mesh {
 public:
  // A world of `world_size` ranks cut into tensor groups of `tensor_parallel` and pipelines of
  // `pipeline_parallel` stages; the data-parallel size is what remains. Throws ConfigError
  // naming [strategy.hybrid] tensor_parallel, pipeline_parallel and the world size when
  // tensor_parallel * pipeline_parallel does not divide it (or a size is below 1).
  Mesh(int world_size, int tensor_parallel, int pipeline_parallel);

  [[nodiscard]] int world_size() const noexcept { return tp_ * dp_ * pp_; }
  [[nodiscard]] int tensor_size() const noexcept { return tp_; }
  [[nodiscard]] int data_size() const noexcept { return dp_; }
  [[nodiscard]] int pipeline_size() const noexcept { return pp_; }

  // Throws InvalidArgument for a rank outside the world or coordinates outside the mesh.
  [[nodiscard]] MeshCoordinates coordinates(int world_rank) const;
  [[nodiscard]] int rank_of(MeshCoordinates at) const;

  // The world ranks of `world_rank`'s tensor, data and pipeline group, in group-rank order
  // (ordered by the coordinate that varies along the group).
  [[nodiscard]] std::vector<int> tensor_group(int world_rank) const;
  [[nodiscard]] std::vector<int> data_group(int world_rank) const;
  [[nodiscard]] std::vector<int> pipeline_group(int world_rank) const;

 private:
  int tp_ = 1;
  int dp_ = 1;
  int pp_ = 1;
};

// This rank's three groups, made from the world with Communicator::split. Collective over the
// world: every rank constructs it at the same point (three splits, in the order tensor, data,
// pipeline). Blocks until the groups are connected; TransportError/Timeout from the world.
struct MeshGroups {
  MeshGroups(Communicator& world, const Mesh& mesh);

  MeshCoordinates at;
  std::shared_ptr<Communicator> tensor;    // rank() == at.tensor
  std::shared_ptr<Communicator> data;      // rank() == at.data
  std::shared_ptr<Communicator> pipeline;  // rank() == at.pipeline
};

}  // namespace tessera::hybrid
