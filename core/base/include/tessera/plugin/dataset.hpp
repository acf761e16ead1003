#pragma once
// Dataset: random access to samples, so the engine can shard every epoch's order across ranks.

#include <cstddef>
#include <span>

#include "tessera/base/tensor.hpp"
#include "tessera/plugin/plugin_object.hpp"

namespace tessera {

enum class Split : std::uint8_t { train, test };

struct Batch {
  Tensor inputs;   // [n, sample elements], f32
  Tensor targets;  // [n], i64 class indices
};

// Thread-safety: const methods may be called concurrently. Data errors (missing, truncated or
// malformed files) throw DataError from the constructor, naming the file.
class Dataset : public PluginObject {
 public:
  [[nodiscard]] virtual std::size_t size(Split split) const noexcept = 0;
  [[nodiscard]] virtual Shape sample_shape() const = 0;
  [[nodiscard]] virtual std::size_t num_classes() const noexcept = 0;
  // Copies the samples at `indices` (each < size(split)) into a new batch.
  [[nodiscard]] virtual Batch gather(Split split, std::span<const std::size_t> indices) const = 0;
};

}  // namespace tessera
