#include "synthetic/synthetic.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <string>

#include "tessera/base/error.hpp"
#include "tessera/base/random.hpp"

namespace tessera::synthetic {
namespace {

constexpr std::uint64_t kWeightStream = 0;
constexpr std::uint64_t kTrainStream = 1;
constexpr std::uint64_t kTestStream = 2;

// Box-Muller on two counter-based uniforms; 1 - u keeps the logarithm's argument in (0, 1].
float normal(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  const float u1 = 1.0F - counter_uniform(seed, stream, 2 * index);
  const float u2 = counter_uniform(seed, stream, 2 * index + 1);
  return std::sqrt(-2.0F * std::log(u1)) * std::cos(2.0F * std::numbers::pi_v<float> * u2);
}

}  // namespace

SyntheticDataset::SyntheticDataset(const SyntheticConfig& config)
    : features_(config.features),
      classes_(config.classes),
      seed_(config.seed),
      samples_(config.samples),
      test_samples_(config.test_samples),
      context_(config.context) {
  // Config errors, not checks: the values come from the user's [dataset.synthetic] section.
  if (features_ == 0) throw ConfigError("[dataset.synthetic] features = 0: must be at least 1");
  if (classes_ < 2) {
    throw ConfigError("[dataset.synthetic] classes = " + std::to_string(classes_) +
                      ": must be at least 2");
  }
  if (config.samples == 0) {
    throw ConfigError("[dataset.synthetic] samples = 0: the training split needs at least one");
  }
  if (context_ > 0) return;  // token windows are computed per gather: nothing is held
  // Checked before anything is generated: a data set larger than the host's memory would
  // otherwise end in std::bad_alloc, with nothing saying which option made it so large.
  const double bytes = (static_cast<double>(samples_) + static_cast<double>(test_samples_)) *
                       static_cast<double>(features_) * sizeof(float);
  const double memory =
      static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  if (memory > 0 && bytes > memory) {
    throw ConfigError("[dataset.synthetic] (samples + test_samples) x features = " +
                      std::to_string(samples_ + test_samples_) + " x " + std::to_string(features_) +
                      " floats is " + std::to_string(static_cast<long long>(bytes / (1 << 20))) +
                      " MiB, more than this host's " +
                      std::to_string(static_cast<long long>(memory / (1 << 20))) +
                      " MiB of memory");
  }
}

void SyntheticDataset::materialize() const {
  std::call_once(materialized_, [this] {
    std::vector<float> weights(classes_ * features_);
    for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = normal(seed_, kWeightStream, i);
    train_ = generate(kTrainStream, samples_, weights);
    test_ = generate(kTestStream, test_samples_, weights);
  });
}

namespace {

std::size_t positive(const Options& options, const char* key) {
  const std::int64_t value = options.get_int(key);
  if (value < 0) {
    throw ConfigError(std::string("[dataset.synthetic] ") + key + " = " + std::to_string(value) +
                      ": must not be negative");
  }
  return static_cast<std::size_t>(value);
}

}  // namespace

SyntheticDataset::SyntheticDataset(const Options& options)
    : SyntheticDataset(SyntheticConfig{
          positive(options, "samples"), positive(options, "test_samples"),
          positive(options, "features"), positive(options, "classes"),
          static_cast<std::uint64_t>(options.get_int("seed")), positive(options, "context")}) {}

SampleLayout SyntheticDataset::layout() const {
  if (context_ > 0) return {DType::i64, {context_}, {context_}, classes_};
  return {DType::f32, {features_}, {}, classes_};
}

SyntheticDataset::Part SyntheticDataset::generate(std::uint64_t stream, std::size_t samples,
                                                  const std::vector<float>& weights) const {
  Part part{std::vector<float>(samples * features_), std::vector<std::int64_t>(samples)};
  for (std::size_t s = 0; s < samples; ++s) {
    float* x = part.inputs.data() + s * features_;
    for (std::size_t j = 0; j < features_; ++j) x[j] = normal(seed_, stream, s * features_ + j);
    std::size_t best = 0;
    double best_score = 0.0;
    for (std::size_t c = 0; c < classes_; ++c) {
      const float* w = weights.data() + c * features_;
      double score = 0.0;
      for (std::size_t j = 0; j < features_; ++j) score += static_cast<double>(w[j]) * x[j];
      if (c == 0 || score > best_score) {
        best = c;
        best_score = score;
      }
    }
    part.labels[s] = static_cast<std::int64_t>(best);
  }
  return part;
}

std::size_t SyntheticDataset::size(Split split) const noexcept {
  return split == Split::train ? samples_ : test_samples_;
}

Batch SyntheticDataset::gather_tokens(Split split, std::span<const std::size_t> indices) const {
  // Sample i is the window [i * context, (i + 1) * context] of its split's stream, as the text
  // data set cuts its corpus: the inputs are its first context ids, the targets its last.
  const std::uint64_t stream = split == Split::train ? kTrainStream : kTestStream;
  const auto token = [&](std::uint64_t position) {
    const auto id = static_cast<std::size_t>(counter_uniform(seed_, stream, position) *
                                             static_cast<float>(classes_));
    return static_cast<std::int64_t>(std::min(id, classes_ - 1));
  };
  const std::size_t n = indices.size();
  Batch batch{Tensor({n, context_}, DType::i64), Tensor({n, context_}, DType::i64)};
  std::int64_t* x = batch.inputs.as<std::int64_t>().data();
  std::int64_t* y = batch.targets.as<std::int64_t>().data();
  for (std::size_t r = 0; r < n; ++r) {
    TESSERA_CHECK(indices[r] < size(split),
                  "sample " + std::to_string(indices[r]) + " of " + std::to_string(size(split)));
    const std::uint64_t start = static_cast<std::uint64_t>(indices[r]) * context_;
    for (std::size_t t = 0; t < context_; ++t) {
      x[r * context_ + t] = token(start + t);
      y[r * context_ + t] = token(start + t + 1);
    }
  }
  return batch;
}

Batch SyntheticDataset::gather(Split split, std::span<const std::size_t> indices) const {
  if (context_ > 0) return gather_tokens(split, indices);
  materialize();
  const Part& part = split == Split::train ? train_ : test_;
  const std::size_t n = indices.size();
  Batch batch{Tensor({n, features_}, DType::f32), Tensor({n}, DType::i64)};
  float* x = batch.inputs.as<float>().data();
  std::int64_t* y = batch.targets.as<std::int64_t>().data();
  for (std::size_t r = 0; r < n; ++r) {
    const std::size_t index = indices[r];
    TESSERA_CHECK(index < part.labels.size(),
                  "sample " + std::to_string(index) + " of " + std::to_string(part.labels.size()));
    std::memcpy(x + r * features_, part.inputs.data() + index * features_,
                features_ * sizeof(float));
    y[r] = part.labels[index];
  }
  return batch;
}

}  // namespace tessera::synthetic
