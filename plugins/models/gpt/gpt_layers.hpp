#pragma once
// GPT-2's layers as tessera Layers (Radford et al. 2019; the layout of nanoGPT and llm.c): the
// input embedding, the pre-norm residual block, the final layer norm and the output head. A
// block is one Layer, so that every strategy treats it as one unit (zero3 gathers a block at a
// time, as FSDP wraps one; a pipeline cuts between blocks). Activations are [n, T, width].
// Host memory only: a GPU run of the gpt model is refused by the layers' device check.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "layers/causal_attention.hpp"
#include "layers/compute_context.hpp"
#include "layers/dropout.hpp"
#include "layers/embedding.hpp"
#include "layers/linear.hpp"
#include "tessera/plugin/layer.hpp"

namespace tessera::gpt {

struct GptShape {
  std::size_t layers = 4;
  std::size_t heads = 4;
  std::size_t width = 128;   // channels of the residual stream; a multiple of heads
  std::size_t context = 64;  // the longest sequence (rows of the position table)
  std::size_t vocab = 256;
  // The output head uses the token embedding wte (GPT-2's tie: one [vocab, width] matrix for
  // both), or a matrix lm_head.weight of its own.
  bool tie_embeddings = true;
  // Dropout rate in training, at nanoGPT's four places: the embedding sum, each block's attention
  // probabilities (unless attention_dropout says otherwise), and its attention and MLP outputs
  // before they join the residual stream. 0 draws nothing: the bits of a model without dropout.
  // Evaluation and sampling never drop (LayerContext::training unset).
  float dropout = 0.0F;
  // Weight decay on every parameter, as PyTorch's AdamW over model.parameters() does, instead of
  // nanoGPT's rule (the matrices only; layers/param_specs.hpp).
  bool decay_all = false;
  // The rate on the attention probabilities alone (GPT-2's attn_pdrop); nullopt: `dropout`'s.
  std::optional<float> attention_dropout = std::nullopt;
  [[nodiscard]] float attention_rate() const noexcept {
    return attention_dropout.value_or(dropout);
  }
};

// GPT-2's initialisation: N(0, 0.02) for embeddings and matrices, the residual projections
// scaled by 1/sqrt(2 layers) (two per block add into the stream), zero biases, unit norms.
inline constexpr float kInitStd = 0.02F;

// Dropout site numbers (layers/dropout.hpp's DropoutKey::site): the embedding's is 0; block b's
// attention probabilities, attention output and MLP output are 1 + 3b, 2 + 3b and 3 + 3b.
inline constexpr std::size_t kDropoutSitesPerBlock = 3;

// The rows [first, first + count) of the vocabulary a tensor rank holds of wte and of the head
// (Megatron's vocabulary-parallel split, TensorParallelRole::vocabulary): TensorSlice::range_of
// the vocabulary, the first ranks one row more when tp does not divide it. Whole: [0, vocab).
struct VocabularyRows {
  std::size_t first = 0;
  std::size_t count = 0;
  bool sliced = false;
};

// Token ids i64 [n, T] (T <= context) -> [n, T, width]: wte[token] + wpe[position], then dropout.
// Parameters: "wte" [vocab, width], "wpe" [context, width]. No input gradient (ids).
//
// Split by vocabulary (role vocabulary): tensor rank r holds wte's rows [first, first + count)
// and wpe whole; it looks up the ids in its rows (zeros for the others), the tensor group sums
// (LayerContext::sum_over_tensor_group: one term is not zero, so the sum has the whole lookup's
// bits), then wpe is added once and dropout drawn, as whole. Backward: the output gradient is the
// same on every rank; each adds into its own rows of wte (tokens outside add nothing) and into
// the whole wpe, whose gradient is then the same bits on every rank.
class Embedding final : public Layer {
 public:
  Embedding(const GptShape& shape, std::shared_ptr<const layers::ComputeContext> compute);
  [[nodiscard]] std::string name() const override { return "embedding"; }
  [[nodiscard]] std::vector<ParamSpec> parameters() const override;
  [[nodiscard]] Shape output_shape(const Shape& input) const override;
  Tensor forward(const Tensor& input, std::span<const BufferView> params,
                 LayerContext& ctx) const override;
  Tensor backward(const Tensor& grad_output, std::span<const BufferView> params,
                  std::span<const BufferView> grads, LayerContext& ctx) const override;

 protected:
  // Role vocabulary only; nullptr for the others.
  [[nodiscard]] std::unique_ptr<Layer> do_sliced(TensorParallelRole role,
                                                 TensorSlice slice) const override;

 private:
  [[nodiscard]] layers::EmbeddingShape kernel_shape(const Shape& tokens) const;

  GptShape shape_;
  std::shared_ptr<const layers::ComputeContext> compute_;
  VocabularyRows rows_;
};

// Block `index`: x + drop(attn(ln_1(x))), then + drop(mlp(ln_2(.))); causal multi-head attention
// (online softmax: backward keeps O(n T heads) statistics, not the T x T matrices; its
// probabilities dropped inside the kernel, layers/causal_attention.hpp) and a GELU-tanh MLP of
// 4x width. Parameters "h.<index>." + ln_1.{weight,bias}, attn.c_attn.{weight,bias}
// ([3 width, width]: the rows of Q, K and V), attn.c_proj.{weight,bias}, ln_2.{weight,bias},
// mlp.c_fc.{weight,bias} ([4 width, width]), mlp.c_proj.{weight,bias}.
//
// Tensor parallelism (role pair, Megatron's split of a transformer block): tensor rank r of tp
// holds heads [h0, h1) (heads / tp of them): the rows of Q, K and V of those heads out of
// c_attn (one ParamSlice of 3 blocks) and the matching input columns of attn.c_proj; and
// features [f0, f1) of the 4 width MLP: rows of mlp.c_fc, input columns of mlp.c_proj. ln_1,
// ln_2 and the two c_proj biases are whole on every rank. The partial outputs of both c_proj are
// summed over the tensor group (LayerContext::sum_over_tensor_group) before the residual add,
// which then happens once; in backward the partial input gradients of c_attn and c_fc are summed
// before ln_1 and ln_2, so the norms' gradients are equal on every tensor rank.
class Block final : public Layer {
 public:
  Block(std::size_t index, const GptShape& shape,
        std::shared_ptr<const layers::ComputeContext> compute);
  [[nodiscard]] std::string name() const override { return prefix_ + "block"; }
  [[nodiscard]] std::vector<ParamSpec> parameters() const override { return specs_; }
  [[nodiscard]] Shape output_shape(const Shape& input) const override { return input; }
  Tensor forward(const Tensor& input, std::span<const BufferView> params,
                 LayerContext& ctx) const override;
  Tensor backward(const Tensor& grad_output, std::span<const BufferView> params,
                  std::span<const BufferView> grads, LayerContext& ctx) const override;

 protected:
  // Role pair only (nullptr for column and row: a block's input and output are whole). Throws
  // InvalidArgument when the tensor size does not divide the heads (a head is never split).
  [[nodiscard]] std::unique_ptr<Layer> do_sliced(TensorParallelRole role,
                                                 TensorSlice slice) const override;

 private:
  Block(const Block& whole, TensorSlice slice);
  // The masks of this block's attention and MLP outputs in the call `ctx` belongs to (each
  // nullopt when nothing is dropped); `time` is the call's T.
  [[nodiscard]] std::pair<std::optional<layers::DropoutKey>, std::optional<layers::DropoutKey>>
  dropout_keys(const LayerContext& ctx, std::size_t time) const;
  // The mask of this block's attention probabilities in that call (rate 0: none).
  [[nodiscard]] layers::AttentionDropout attention_dropout(const LayerContext& ctx,
                                                           std::size_t time) const;

  std::string prefix_;
  GptShape shape_;
  std::shared_ptr<const layers::ComputeContext> compute_;
  std::size_t index_;
  // What this rank computes with: all heads and 4 width MLP features, or its slice's.
  std::size_t heads_ = 0;
  std::size_t first_head_ = 0;  // the global number of this rank's head 0
  std::size_t head_width_ = 0;
  std::unique_ptr<const Layer> qkv_, attn_proj_, fc_, mlp_proj_;
  std::vector<ParamSpec> specs_;
  bool sliced_ = false;
};

// The final layer norm: "ln_f.weight", "ln_f.bias" over the last dimension.
class FinalNorm final : public Layer {
 public:
  FinalNorm(const GptShape& shape, std::shared_ptr<const layers::ComputeContext> compute);
  [[nodiscard]] std::string name() const override { return "ln_f"; }
  [[nodiscard]] std::vector<ParamSpec> parameters() const override;
  [[nodiscard]] Shape output_shape(const Shape& input) const override { return input; }
  Tensor forward(const Tensor& input, std::span<const BufferView> params,
                 LayerContext& ctx) const override;
  Tensor backward(const Tensor& grad_output, std::span<const BufferView> params,
                  std::span<const BufferView> grads, LayerContext& ctx) const override;

 private:
  GptShape shape_;
  std::shared_ptr<const layers::ComputeContext> compute_;
};

// The output head without bias: [n, T, width] -> logits [n, T, vocab]. Parameter
// "lm_head.weight" [vocab, width], tied to the embedding's "wte" (ParamSpec::tied_to) unless
// shape.tie_embeddings is false.
//
// Split by vocabulary (role vocabulary, Megatron's column-parallel head): tensor rank r holds
// rows [first, first + count) of lm_head.weight, the embedding's rows of wte when tied (the same
// ParamSlice, so the tie stays one parameter), and computes logits [n, T, count] of its classes
// only, which the model's loss_over_vocabulary_slice reads. Backward adds its rows' gradient and
// sums the input gradient (each rank's is the part through its classes) over the tensor group.
class Head final : public Layer {
 public:
  Head(const GptShape& shape, std::shared_ptr<const layers::ComputeContext> compute);
  [[nodiscard]] std::string name() const override { return "lm_head"; }
  [[nodiscard]] std::vector<ParamSpec> parameters() const override;
  [[nodiscard]] Shape output_shape(const Shape& input) const override;
  Tensor forward(const Tensor& input, std::span<const BufferView> params,
                 LayerContext& ctx) const override;
  Tensor backward(const Tensor& grad_output, std::span<const BufferView> params,
                  std::span<const BufferView> grads, LayerContext& ctx) const override;

 protected:
  // Role vocabulary only; nullptr for the others.
  [[nodiscard]] std::unique_ptr<Layer> do_sliced(TensorParallelRole role,
                                                 TensorSlice slice) const override;

 private:
  GptShape shape_;
  std::shared_ptr<const layers::ComputeContext> compute_;
  VocabularyRows rows_;
};

}  // namespace tessera::gpt
