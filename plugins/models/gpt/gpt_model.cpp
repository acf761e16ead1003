#include "gpt/gpt_model.hpp"

#include <charconv>
#include <optional>
#include <sstream>
#include <string>

#include "layers/softmax_cross_entropy.hpp"
#include "tessera/base/error.hpp"

namespace tessera::gpt {

void check_shape(const GptShape& s) {
  const auto refuse = [](const std::string& option, const std::string& why) {
    throw ConfigError("model.gpt." + option + ": " + why);
  };
  if (s.layers < 1) refuse("layers", "needs at least one block");
  if (s.heads < 1) refuse("heads", "needs at least one attention head");
  if (s.width < 1 || s.width % s.heads != 0) {
    refuse("width", std::to_string(s.width) + " is not a positive multiple of heads = " +
                        std::to_string(s.heads) + " (each head takes width / heads channels)");
  }
  if (s.context < 1) refuse("context", "needs at least one position");
  if (s.vocab < 2) refuse("vocab", "needs at least two tokens");
  // Written so that NaN is refused too.
  const auto check_rate = [&](const std::string& option, float rate, const std::string& what) {
    if (rate >= 0.0F && rate < 1.0F) return;
    std::ostringstream text;
    text << rate;
    refuse(option, text.str() + " is not a rate in [0, 1) (the share of " + what +
                       " zeroed in training; 0 turns dropout off)");
  };
  check_rate("dropout", s.dropout, "activations");
  if (s.attention_dropout) {
    check_rate("attention_dropout", *s.attention_dropout, "attention probabilities");
  }
}

GptModel::GptModel(const GptConfig& config)
    : shape_(config.shape), compute_(std::make_shared<layers::ComputeContext>(config.threads)) {
  check_shape(shape_);
  layers::set_blas_threads(config.threads);
  layers_.push_back(std::make_unique<Embedding>(shape_, compute_));
  for (std::size_t l = 0; l < shape_.layers; ++l) {
    layers_.push_back(std::make_unique<Block>(l, shape_, compute_));
  }
  layers_.push_back(std::make_unique<FinalNorm>(shape_, compute_));
  layers_.push_back(std::make_unique<Head>(shape_, compute_));
}

namespace {

std::size_t positive(const Options& options, const char* key) {
  const std::int64_t value = options.get_int(key);
  if (value < 1) {
    throw ConfigError(std::string("model.gpt.") + key + ": " + std::to_string(value) +
                      " is not a positive integer");
  }
  return static_cast<std::size_t>(value);
}

// attention_dropout: empty for dropout's rate, else a number (check_shape checks its range).
std::optional<float> attention_rate_from(const Options& options) {
  const std::string& text = options.get_string("attention_dropout");
  if (text.empty()) return std::nullopt;
  float rate = 0.0F;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), rate);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw ConfigError("model.gpt.attention_dropout: '" + text +
                      "' is not a number; give a rate in [0, 1), or leave it empty for the rate "
                      "of dropout");
  }
  return rate;
}

GptConfig config_from(const Options& options) {
  GptConfig config;
  config.shape = {positive(options, "layers"),
                  positive(options, "heads"),
                  positive(options, "width"),
                  positive(options, "context"),
                  positive(options, "vocab"),
                  options.get_bool("tie_embeddings"),
                  static_cast<float>(options.get_float("dropout")),
                  options.get_bool("decay_all"),
                  attention_rate_from(options)};
  config.threads = static_cast<int>(positive(options, "threads"));
  return config;
}

}  // namespace

GptModel::GptModel(const Options& options) : GptModel(config_from(options)) {}

SampleLayout GptModel::layout() const {
  return {DType::i64, {shape_.context}, {shape_.context}, shape_.vocab};
}

const Layer& GptModel::layer(std::size_t index) const {
  TESSERA_CHECK(index < layers_.size(),
                "gpt: layer " + std::to_string(index) + " of " + std::to_string(layers_.size()));
  return *layers_[index];
}

LossResult GptModel::loss(const Tensor& logits, const Tensor& targets) const {
  return layers::softmax_cross_entropy(logits, targets, shape_.vocab, *compute_);
}

LossResult GptModel::loss_over_vocabulary_slice(const Tensor& logits, const Tensor& targets,
                                                const VocabularySlice& slice) const {
  TESSERA_CHECK(slice.classes == shape_.vocab,
                "gpt: a vocabulary slice of " + std::to_string(slice.classes) +
                    " classes for a vocabulary of " + std::to_string(shape_.vocab));
  return layers::vocabulary_parallel_cross_entropy(logits, targets, slice, *compute_);
}

}  // namespace tessera::gpt
