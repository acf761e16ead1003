#pragma once
// `attention_lm`: a small transformer language model written only against what an installed
// tessera offers a model author (tessera::sdk and tessera::layers). Token and position
// embeddings, `blocks` pre-norm residual attention blocks (x + proj(attention(qkv(ln(x))))),
// then a head (layer norm and a Linear to the vocabulary). Each block is ONE Layer: zero3 gathers
// it as one unit and a pipeline cuts between blocks. Activations are f32 [n, T, width].

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "layers/compute_context.hpp"
#include "layers/linear.hpp"
#include "tessera/plugin/model.hpp"
#include "tessera/plugin/options.hpp"

namespace attention_lm {

struct LmShape {
  std::size_t blocks = 2;
  std::size_t heads = 2;
  std::size_t width = 64;    // a multiple of heads
  std::size_t context = 32;  // tokens per sample: the data set's windows must match
  std::size_t vocab = 256;   // byte-level text
};

// i64 token ids [n, T] -> [n, T, width]: wte[token] + wpe[position]. Token ids have no gradient.
class TokenEmbedding final : public tessera::Layer {
 public:
  TokenEmbedding(const LmShape& shape,
                 std::shared_ptr<const tessera::layers::ComputeContext> compute);
  [[nodiscard]] std::string name() const override { return "embedding"; }
  [[nodiscard]] std::vector<tessera::ParamSpec> parameters() const override;
  [[nodiscard]] tessera::Shape output_shape(const tessera::Shape& input) const override;
  tessera::Tensor forward(const tessera::Tensor& input, std::span<const tessera::BufferView> params,
                          tessera::LayerContext& ctx) const override;
  tessera::Tensor backward(const tessera::Tensor& grad_output,
                           std::span<const tessera::BufferView> params,
                           std::span<const tessera::BufferView> grads,
                           tessera::LayerContext& ctx) const override;

 private:
  LmShape shape_;
  std::shared_ptr<const tessera::layers::ComputeContext> compute_;
};

// Block `index`: x + proj(attention(qkv(ln(x)))), causal multi-head attention over `heads`.
// Parameters "b.<index>." + ln.weight, ln.bias, qkv.weight [3 width, width], qkv.bias,
// proj.weight [width, width], proj.bias.
class AttentionBlock final : public tessera::Layer {
 public:
  AttentionBlock(std::size_t index, const LmShape& shape,
                 std::shared_ptr<const tessera::layers::ComputeContext> compute);
  [[nodiscard]] std::string name() const override { return prefix_ + "block"; }
  [[nodiscard]] std::vector<tessera::ParamSpec> parameters() const override;
  [[nodiscard]] tessera::Shape output_shape(const tessera::Shape& input) const override {
    return input;
  }
  tessera::Tensor forward(const tessera::Tensor& input, std::span<const tessera::BufferView> params,
                          tessera::LayerContext& ctx) const override;
  tessera::Tensor backward(const tessera::Tensor& grad_output,
                           std::span<const tessera::BufferView> params,
                           std::span<const tessera::BufferView> grads,
                           tessera::LayerContext& ctx) const override;

 private:
  std::string prefix_;
  LmShape shape_;
  std::shared_ptr<const tessera::layers::ComputeContext> compute_;
  tessera::layers::Linear qkv_, proj_;
};

// [n, T, width] -> logits [n, T, vocab]: layer norm, then a Linear ("head.weight", "head.bias").
class Head final : public tessera::Layer {
 public:
  Head(const LmShape& shape, std::shared_ptr<const tessera::layers::ComputeContext> compute);
  [[nodiscard]] std::string name() const override { return "head"; }
  [[nodiscard]] std::vector<tessera::ParamSpec> parameters() const override;
  [[nodiscard]] tessera::Shape output_shape(const tessera::Shape& input) const override;
  tessera::Tensor forward(const tessera::Tensor& input, std::span<const tessera::BufferView> params,
                          tessera::LayerContext& ctx) const override;
  tessera::Tensor backward(const tessera::Tensor& grad_output,
                           std::span<const tessera::BufferView> params,
                           std::span<const tessera::BufferView> grads,
                           tessera::LayerContext& ctx) const override;

 private:
  LmShape shape_;
  std::shared_ptr<const tessera::layers::ComputeContext> compute_;
  tessera::layers::Linear linear_;
};

class AttentionLm final : public tessera::Model {
 public:
  explicit AttentionLm(const tessera::Options& options);

  // i64 [context] token ids in, [context] next tokens of `vocab` classes out.
  [[nodiscard]] tessera::SampleLayout layout() const override;
  [[nodiscard]] std::size_t layer_count() const noexcept override { return layers_.size(); }
  [[nodiscard]] const tessera::Layer& layer(std::size_t index) const override;
  [[nodiscard]] tessera::LossResult loss(const tessera::Tensor& logits,
                                         const tessera::Tensor& targets) const override;

 private:
  LmShape shape_;
  std::shared_ptr<const tessera::layers::ComputeContext> compute_;
  std::vector<std::unique_ptr<tessera::Layer>> layers_;
};

}  // namespace attention_lm
