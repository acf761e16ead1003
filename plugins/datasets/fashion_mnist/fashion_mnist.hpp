#pragma once
// Fashion-MNIST from its four gzip'ed IDX files: 60000 training and 10000 test images of 28x28
// pixels, ten classes.

#include <filesystem>
#include <vector>

#include "tessera/plugin/dataset.hpp"
#include "tessera/plugin/options.hpp"

namespace tessera::fashion_mnist {

inline constexpr float kMean = 0.2860F;  // of the training pixels scaled to [0, 1]
inline constexpr float kStd = 0.3530F;

struct FashionMnistConfig {
  std::filesystem::path path = "/usr/share/datasets/fashion-mnist";
  bool normalize = true;  // (x / 255 - kMean) / kStd, else x / 255
};

// Holds the pixels as bytes (a quarter of the floats' memory) and converts on gather().
class FashionMnist final : public Dataset {
 public:
  // Reads all four files; throws DataError naming the file for anything missing or malformed,
  // including image and label files whose counts disagree and labels outside 0..9.
  explicit FashionMnist(const FashionMnistConfig& config);
  explicit FashionMnist(const Options& options);

  [[nodiscard]] std::size_t size(Split split) const noexcept override;
  [[nodiscard]] SampleLayout layout() const override { return {DType::f32, {pixels_}, {}, 10}; }
  [[nodiscard]] Batch gather(Split split, std::span<const std::size_t> indices) const override;

 private:
  struct Part {
    std::vector<std::uint8_t> images;
    std::vector<std::uint8_t> labels;
  };
  [[nodiscard]] Part load(const std::filesystem::path& images, const std::filesystem::path& labels);

  bool normalize_;
  std::size_t pixels_ = 0;
  Part train_;
  Part test_;
};

}  // namespace tessera::fashion_mnist
