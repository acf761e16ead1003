#pragma once
// A seeded, learnable classification task: inputs are standard normal, labels are the arg-max
// of a fixed random linear map of the input, so a model that learns the map drives the loss
// down. Useful for tests and throughput benchmarks without files. With `context` > 0 it is a
// token stream instead (uniform ids in [0, classes), nothing to learn): windows of `context`
// i64 ids and their next tokens, the layout of a language model, for speed measurements at any
// vocabulary (the `text` data set is byte-level, 256 ids).

#include <cstdint>
#include <mutex>
#include <vector>

#include "tessera/plugin/dataset.hpp"
#include "tessera/plugin/options.hpp"

namespace tessera::synthetic {

struct SyntheticConfig {
  std::size_t samples = 10000;  // training split
  std::size_t test_samples = 2000;
  std::size_t features = 784;
  std::size_t classes = 10;
  std::uint64_t seed = 0;
  std::size_t context = 0;  // > 0: token windows of this length instead of feature vectors
};

// Every value is a pure function of (seed, split, index), so the data are the same on every
// rank and platform. Materialised by the first gather() (once, thread-safe), so that creating
// the data set to check its shape and classes against a model costs nothing; gather() is then
// a copy.
class SyntheticDataset final : public Dataset {
 public:
  // Throws InvalidArgument for zero features, fewer than two classes or no training samples.
  explicit SyntheticDataset(const SyntheticConfig& config);
  explicit SyntheticDataset(const Options& options);

  [[nodiscard]] std::size_t size(Split split) const noexcept override;
  [[nodiscard]] SampleLayout layout() const override;
  [[nodiscard]] Batch gather(Split split, std::span<const std::size_t> indices) const override;

 private:
  struct Part {
    std::vector<float> inputs;
    std::vector<std::int64_t> labels;
  };
  [[nodiscard]] Part generate(std::uint64_t stream, std::size_t samples,
                              const std::vector<float>& weights) const;

  void materialize() const;
  [[nodiscard]] Batch gather_tokens(Split split, std::span<const std::size_t> indices) const;

  std::size_t features_;
  std::size_t classes_;
  std::uint64_t seed_;
  std::size_t samples_;
  std::size_t test_samples_;
  std::size_t context_;
  mutable std::once_flag materialized_;
  mutable Part train_;
  mutable Part test_;
};

}  // namespace tessera::synthetic
