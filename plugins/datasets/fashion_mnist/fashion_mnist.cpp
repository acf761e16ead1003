#include "fashion_mnist/fashion_mnist.hpp"

#include <string>

#include "fashion_mnist/idx_reader.hpp"
#include "tessera/base/error.hpp"

namespace tessera::fashion_mnist {

FashionMnist::FashionMnist(const FashionMnistConfig& config) : normalize_(config.normalize) {
  train_ =
      load(config.path / "train-images-idx3-ubyte.gz", config.path / "train-labels-idx1-ubyte.gz");
  test_ =
      load(config.path / "t10k-images-idx3-ubyte.gz", config.path / "t10k-labels-idx1-ubyte.gz");
}

FashionMnist::FashionMnist(const Options& options)
    : FashionMnist(FashionMnistConfig{options.get_string("path"), options.get_bool("normalize")}) {}

FashionMnist::Part FashionMnist::load(const std::filesystem::path& images,
                                      const std::filesystem::path& labels) {
  IdxArray image_array = read_idx_ubyte(images, 3);
  IdxArray label_array = read_idx_ubyte(labels, 1);
  const std::size_t pixels = std::size_t{image_array.dims[1]} * image_array.dims[2];
  if (pixels == 0) throw DataError(images.string() + ": images have no pixels");
  if (image_array.dims[0] == 0) {
    throw DataError(images.string() + ": holds no images (its IDX header counts 0)");
  }
  if (pixels_ != 0 && pixels != pixels_) {
    throw DataError(images.string() + ": images of " + std::to_string(pixels) +
                    " pixels, the training images have " + std::to_string(pixels_));
  }
  pixels_ = pixels;
  if (image_array.dims[0] != label_array.dims[0]) {
    throw DataError(images.string() + " holds " + std::to_string(image_array.dims[0]) +
                    " images but " + labels.string() + " holds " +
                    std::to_string(label_array.dims[0]) + " labels");
  }
  for (std::size_t i = 0; i < label_array.data.size(); ++i) {
    if (label_array.data[i] >= 10) {
      throw DataError(labels.string() + ": label " + std::to_string(label_array.data[i]) +
                      " of item " + std::to_string(i) + " is not a class 0..9");
    }
  }
  return Part{std::move(image_array.data), std::move(label_array.data)};
}

std::size_t FashionMnist::size(Split split) const noexcept {
  return (split == Split::train ? train_ : test_).labels.size();
}

Batch FashionMnist::gather(Split split, std::span<const std::size_t> indices) const {
  const Part& part = split == Split::train ? train_ : test_;
  const std::size_t n = indices.size();
  Batch batch{Tensor({n, pixels_}, DType::f32), Tensor({n}, DType::i64)};
  float* x = batch.inputs.as<float>().data();
  std::int64_t* y = batch.targets.as<std::int64_t>().data();
  // x / 255 then (x - mean) / std, both in float, so every rank converts a pixel to the same bits.
  const float scale = 1.0F / 255.0F;
  const float mean = normalize_ ? kMean : 0.0F;
  const float inv_std = normalize_ ? 1.0F / kStd : 1.0F;
  for (std::size_t r = 0; r < n; ++r) {
    const std::size_t index = indices[r];
    TESSERA_CHECK(index < part.labels.size(),
                  "sample " + std::to_string(index) + " of " + std::to_string(part.labels.size()));
    const std::uint8_t* src = part.images.data() + index * pixels_;
    float* dst = x + r * pixels_;
    for (std::size_t i = 0; i < pixels_; ++i) {
      dst[i] = (static_cast<float>(src[i]) * scale - mean) * inv_std;
    }
    y[r] = part.labels[index];
  }
  return batch;
}

}  // namespace tessera::fashion_mnist
