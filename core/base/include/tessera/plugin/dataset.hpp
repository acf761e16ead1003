#pragma once
// Dataset: random access to samples, so the engine can shard every epoch's order across ranks.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "tessera/base/tensor.hpp"
#include "tessera/plugin/plugin_object.hpp"

namespace tessera {

enum class Split : std::uint8_t { train, test };

// A target equal to this is no target: it adds no loss, no gradient and no count (padding, or
// the positions of a prompt a language model is not trained on). PyTorch's ignore_index default.
inline constexpr std::int64_t kIgnoreTarget = -100;

// What one sample is, without the batch dimension: the input's element type and shape, and the
// targets the loss reads. A classifier's sample is {f32, {784}, {}, 10}: one class per sample; a
// language model's is {i64, {T}, {T}, V}: T token ids in, the T next tokens out. A data set and
// a model declare theirs and the engine refuses a pair that differ before any rank starts.
struct SampleLayout {
  DType input_dtype = DType::f32;  // f32 features or i64 token ids
  Shape input_shape;
  Shape target_shape;       // {} for one class per sample, {T} for one per token
  std::size_t classes = 0;  // every target is in [0, classes) or is kIgnoreTarget

  // Target elements per sample: what accuracy and a per-token loss count.
  [[nodiscard]] std::size_t targets_per_sample() const noexcept {
    return element_count(target_shape);
  }
  friend bool operator==(const SampleLayout&, const SampleLayout&) = default;
};

// "i64 [64] -> [64] of 256 classes": how errors name a layout.
[[nodiscard]] std::string describe(const SampleLayout& layout);

// inputs: [n, input_shape...] of input_dtype; targets: [n, target_shape...], i64.
struct Batch {
  Tensor inputs;
  Tensor targets;
};

// Thread-safety: const methods may be called concurrently. Data errors (missing, truncated or
// malformed files) throw DataError from the constructor, naming the file.
class Dataset : public PluginObject {
 public:
  [[nodiscard]] virtual std::size_t size(Split split) const noexcept = 0;
  [[nodiscard]] virtual SampleLayout layout() const = 0;
  // Bytes of source text per target, for a language model on text (1 for byte-level tokens):
  // the loss is then also reported in bits per byte. 0, the default: the targets are not text.
  [[nodiscard]] virtual double bytes_per_target() const noexcept { return 0.0; }
  // Copies the samples at `indices` (each < size(split)) into a new batch.
  [[nodiscard]] virtual Batch gather(Split split, std::span<const std::size_t> indices) const = 0;
};

}  // namespace tessera
