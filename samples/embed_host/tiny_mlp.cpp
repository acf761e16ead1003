#include "tiny_mlp.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

namespace embed_host {

namespace {

enum : std::size_t { kW1, kB1, kW2, kB2 };

// Softmax cross-entropy of one row of logits; writes d(loss)/d(logits) into grad when given.
double cross_entropy(std::span<const float> logits, std::int64_t label, float* grad, float scale,
                     bool& correct) {
  const float top = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float z : logits) sum += std::exp(static_cast<double>(z - top));
  const auto target = static_cast<std::size_t>(label);
  correct = std::max_element(logits.begin(), logits.end()) - logits.begin() ==
            static_cast<std::ptrdiff_t>(target);
  if (grad != nullptr) {
    for (std::size_t c = 0; c < logits.size(); ++c) {
      const double p = std::exp(static_cast<double>(logits[c] - top)) / sum;
      grad[c] = static_cast<float>((p - (c == target ? 1.0 : 0.0)) * scale);
    }
  }
  return std::log(sum) - static_cast<double>(logits[target] - top);
}

}  // namespace

TinyMlp::TinyMlp(std::size_t inputs, std::size_t hidden, std::size_t classes, std::uint64_t seed)
    : inputs_(inputs), hidden_(hidden), classes_(classes) {
  std::mt19937_64 random(seed);
  auto layer = [&](const char* w, const char* b, std::size_t in, std::size_t out) {
    const float bound = 1.0F / std::sqrt(static_cast<float>(in));
    std::uniform_real_distribution<float> uniform(-bound, bound);
    Parameter weight{w, std::vector<float>(in * out), std::vector<float>(in * out)};
    Parameter bias{b, std::vector<float>(out), std::vector<float>(out)};
    for (float& x : weight.value) x = uniform(random);
    for (float& x : bias.value) x = uniform(random);
    params_.push_back(std::move(weight));
    params_.push_back(std::move(bias));
  };
  layer("w1", "b1", inputs, hidden);   // w1: [inputs][hidden]
  layer("w2", "b2", hidden, classes);  // w2: [hidden][classes]
}

void TinyMlp::forward(std::span<const float> inputs, std::size_t rows, std::vector<float>& hidden,
                      std::vector<float>& logits) const {
  const auto& w1 = params_[kW1].value;
  const auto& b1 = params_[kB1].value;
  const auto& w2 = params_[kW2].value;
  const auto& b2 = params_[kB2].value;
  hidden.assign(rows * hidden_, 0.0F);
  logits.assign(rows * classes_, 0.0F);
  for (std::size_t r = 0; r < rows; ++r) {
    float* h = &hidden[r * hidden_];
    std::copy(b1.begin(), b1.end(), h);
    for (std::size_t i = 0; i < inputs_; ++i) {
      const float x = inputs[r * inputs_ + i];
      if (x == 0.0F) continue;
      const float* w = &w1[i * hidden_];
      for (std::size_t j = 0; j < hidden_; ++j) h[j] += x * w[j];
    }
    for (std::size_t j = 0; j < hidden_; ++j) h[j] = std::max(h[j], 0.0F);
    float* z = &logits[r * classes_];
    std::copy(b2.begin(), b2.end(), z);
    for (std::size_t j = 0; j < hidden_; ++j) {
      const float* w = &w2[j * classes_];
      for (std::size_t c = 0; c < classes_; ++c) z[c] += h[j] * w[c];
    }
  }
}

BatchResult TinyMlp::evaluate(std::span<const float> inputs,
                              std::span<const std::int64_t> labels) const {
  std::vector<float> hidden;
  std::vector<float> logits;
  forward(inputs, labels.size(), hidden, logits);
  BatchResult result;
  for (std::size_t r = 0; r < labels.size(); ++r) {
    bool correct = false;
    result.loss_sum +=
        cross_entropy({&logits[r * classes_], classes_}, labels[r], nullptr, 0.0F, correct);
    result.correct += correct ? 1 : 0;
  }
  return result;
}

BatchResult TinyMlp::forward_backward(std::span<const float> inputs,
                                      std::span<const std::int64_t> labels, float grad_scale,
                                      const std::function<void(std::size_t)>& grad_ready) {
  const std::size_t rows = labels.size();
  if (inputs.size() != rows * inputs_) throw std::invalid_argument("inputs do not match labels");
  std::vector<float> hidden;
  std::vector<float> logits;
  forward(inputs, rows, hidden, logits);

  BatchResult result;
  std::vector<float> grad_logits(rows * classes_);
  for (std::size_t r = 0; r < rows; ++r) {
    bool correct = false;
    result.loss_sum += cross_entropy({&logits[r * classes_], classes_}, labels[r],
                                     &grad_logits[r * classes_], grad_scale, correct);
    result.correct += correct ? 1 : 0;
  }

  for (auto& p : params_) std::fill(p.grad.begin(), p.grad.end(), 0.0F);
  auto& gw2 = params_[kW2].grad;
  auto& gb2 = params_[kB2].grad;
  const auto& w2 = params_[kW2].value;
  std::vector<float> grad_hidden(rows * hidden_, 0.0F);
  for (std::size_t r = 0; r < rows; ++r) {
    const float* g = &grad_logits[r * classes_];
    const float* h = &hidden[r * hidden_];
    for (std::size_t c = 0; c < classes_; ++c) gb2[c] += g[c];
    for (std::size_t j = 0; j < hidden_; ++j) {
      float* gw = &gw2[j * classes_];
      const float* w = &w2[j * classes_];
      float dh = 0.0F;
      for (std::size_t c = 0; c < classes_; ++c) {
        gw[c] += h[j] * g[c];
        dh += w[c] * g[c];
      }
      grad_hidden[r * hidden_ + j] = h[j] > 0.0F ? dh : 0.0F;  // through the ReLU
    }
  }
  // The last layer's gradients are final: hand them over while the first layer's backward runs.
  grad_ready(kW2);
  grad_ready(kB2);

  auto& gw1 = params_[kW1].grad;
  auto& gb1 = params_[kB1].grad;
  for (std::size_t r = 0; r < rows; ++r) {
    const float* g = &grad_hidden[r * hidden_];
    for (std::size_t j = 0; j < hidden_; ++j) gb1[j] += g[j];
    for (std::size_t i = 0; i < inputs_; ++i) {
      const float x = inputs[r * inputs_ + i];
      if (x == 0.0F) continue;
      float* gw = &gw1[i * hidden_];
      for (std::size_t j = 0; j < hidden_; ++j) gw[j] += x * g[j];
    }
  }
  grad_ready(kW1);
  grad_ready(kB1);
  return result;
}

}  // namespace embed_host
