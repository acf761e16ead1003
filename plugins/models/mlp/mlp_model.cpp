#include "mlp/mlp_model.hpp"

#include <charconv>
#include <string>

#include "layers/linear.hpp"
#include "layers/softmax_cross_entropy.hpp"
#include "tessera/base/error.hpp"

namespace tessera::mlp {

std::vector<std::size_t> parse_layer_sizes(std::string_view text) {
  std::vector<std::size_t> sizes;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t comma = std::min(text.find(',', begin), text.size());
    std::string_view item = text.substr(begin, comma - begin);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    std::size_t value = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || value == 0) {
      throw ConfigError("mlp.layers: '" + std::string(item) + "' in '" + std::string(text) +
                        "' is not a positive integer (expected sizes such as 784,256,10)");
    }
    sizes.push_back(value);
    begin = comma + 1;
  }
  if (sizes.size() < 2) {
    throw ConfigError("mlp.layers: '" + std::string(text) +
                      "' needs at least an input and an output size (such as 784,10)");
  }
  return sizes;
}

MlpModel::MlpModel(const MlpConfig& config)
    : sizes_(config.sizes), compute_(std::make_shared<layers::ComputeContext>(config.threads)) {
  TESSERA_CHECK(sizes_.size() >= 2, "mlp needs an input and an output size");
  layers::set_blas_threads(config.threads);
  for (std::size_t i = 0; i + 1 < sizes_.size(); ++i) {
    layers_.push_back(std::make_unique<layers::Linear>("fc" + std::to_string(i), sizes_[i],
                                                       sizes_[i + 1], compute_));
    if (i + 2 < sizes_.size()) {
      layers_.push_back(std::make_unique<layers::Activation>("act" + std::to_string(i),
                                                             config.activation, compute_));
    }
  }
}

namespace {

MlpConfig config_from(const Options& options) {
  MlpConfig config;
  config.sizes = parse_layer_sizes(options.get_string("layers"));
  config.activation = layers::parse_activation(options.get_string("activation"));
  const std::int64_t threads = options.get_int("threads");
  if (threads < 1 || threads > 1024) {
    throw ConfigError("mlp.threads: " + std::to_string(threads) + " is not in [1, 1024]");
  }
  config.threads = static_cast<int>(threads);
  return config;
}

}  // namespace

MlpModel::MlpModel(const Options& options) : MlpModel(config_from(options)) {}

const Layer& MlpModel::layer(std::size_t index) const {
  TESSERA_CHECK(index < layers_.size(),
                "layer " + std::to_string(index) + " of " + std::to_string(layers_.size()));
  return *layers_[index];
}

LossResult MlpModel::loss(const Tensor& logits, const Tensor& targets) const {
  return layers::softmax_cross_entropy(logits, targets, sizes_.back(), *compute_);
}

}  // namespace tessera::mlp
