#include "tessera/plugin/layer.hpp"

#include <algorithm>
#include <string>

#include "tessera/base/error.hpp"

namespace tessera {

std::pair<std::size_t, std::size_t> TensorSlice::range_of(std::size_t extent) const {
  TESSERA_CHECK(size >= 1 && rank >= 0 && rank < size, "tensor rank " + std::to_string(rank) +
                                                           " is not in a tensor group of " +
                                                           std::to_string(size));
  const auto ranks = static_cast<std::size_t>(size);
  const auto r = static_cast<std::size_t>(rank);
  if (extent < ranks) {
    throw InvalidArgument("cannot split " + std::to_string(extent) + " features over " +
                          std::to_string(size) +
                          " tensor ranks (each needs at least one): use a tensor size of at most " +
                          std::to_string(extent));
  }
  const std::size_t base = extent / ranks;
  const std::size_t extra = extent % ranks;
  const std::size_t begin = r * base + std::min(r, extra);
  return {begin, begin + base + (r < extra ? 1 : 0)};
}

std::unique_ptr<Layer> Layer::sliced(TensorParallelRole role, TensorSlice slice) const {
  if (role == TensorParallelRole::replicate) {
    throw InvalidArgument(name() + ": a replicated layer is the layer itself, not a slice of it");
  }
  TESSERA_CHECK(slice.size >= 1 && slice.rank >= 0 && slice.rank < slice.size,
                name() + ": tensor rank " + std::to_string(slice.rank) +
                    " is not in a tensor group of " + std::to_string(slice.size));
  return do_sliced(role, slice);
}

std::unique_ptr<Layer> Layer::do_sliced(TensorParallelRole /*role*/, TensorSlice /*slice*/) const {
  return nullptr;
}

}  // namespace tessera
