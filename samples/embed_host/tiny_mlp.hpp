#pragma once
// The host's own model: a two-layer perceptron (inputs -> hidden ReLU -> classes) with softmax
// cross-entropy, its forward and backward written by hand. Nothing here knows tessera: this
// stands for whatever autograd engine a host application already has.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace embed_host {

// One parameter tensor and its gradient, in host-owned memory that never moves.
struct Parameter {
  std::string name;
  std::vector<float> value;
  std::vector<float> grad;
};

struct BatchResult {
  double loss_sum = 0.0;  // summed over the batch's rows
  std::size_t correct = 0;
};

class TinyMlp {
 public:
  // Parameters initialised from `seed` alone (uniform +-1/sqrt(fan_in), as PyTorch's Linear).
  TinyMlp(std::size_t inputs, std::size_t hidden, std::size_t classes, std::uint64_t seed);

  // w1, b1, w2, b2: the order forward uses them.
  [[nodiscard]] std::vector<Parameter>& parameters() noexcept { return params_; }

  // Loss and accuracy of `rows` samples (inputs row-major, labels class indices).
  [[nodiscard]] BatchResult evaluate(std::span<const float> inputs,
                                     std::span<const std::int64_t> labels) const;

  // Forward and backward: sets every gradient to d(loss_sum * grad_scale)/d(param) and calls
  // grad_ready(index) for each parameter the moment its gradient is final, last layer first.
  BatchResult forward_backward(std::span<const float> inputs, std::span<const std::int64_t> labels,
                               float grad_scale,
                               const std::function<void(std::size_t)>& grad_ready);

 private:
  // Hidden activations (after ReLU) and logits of every row.
  void forward(std::span<const float> inputs, std::size_t rows, std::vector<float>& hidden,
               std::vector<float>& logits) const;

  std::size_t inputs_;
  std::size_t hidden_;
  std::size_t classes_;
  std::vector<Parameter> params_;
};

}  // namespace embed_host
