#pragma once
// The `gpt` model: GPT-2's architecture over byte or token ids (gpt_layers.hpp), trained on
// next-token targets with softmax cross-entropy per token.

#include <memory>
#include <vector>

#include "gpt/gpt_layers.hpp"
#include "layers/compute_context.hpp"
#include "tessera/plugin/model.hpp"
#include "tessera/plugin/options.hpp"

namespace tessera::gpt {

struct GptConfig {
  GptShape shape;
  int threads = 1;
};

// Throws ConfigError naming the option for a shape that cannot work (width not a multiple of
// heads, a vocabulary below 2, ...).
void check_shape(const GptShape& shape);

// Under a tensor group the embedding and the head split by vocabulary (gpt_layers.hpp) and the
// loss reads the head's slice of the logits (VocabularyParallelModel): Megatron's split.
class GptModel final : public Model, public VocabularyParallelModel {
 public:
  explicit GptModel(const GptConfig& config);
  explicit GptModel(const Options& options);

  // i64 [context] token ids in, [context] next tokens of `vocab` classes out.
  [[nodiscard]] SampleLayout layout() const override;
  // embedding, h.0 ... h.<layers - 1>, ln_f, lm_head.
  [[nodiscard]] std::size_t layer_count() const noexcept override { return layers_.size(); }
  [[nodiscard]] const Layer& layer(std::size_t index) const override;
  [[nodiscard]] LossResult loss(const Tensor& logits, const Tensor& targets) const override;
  // Megatron's vocabulary-parallel cross-entropy (layers::vocabulary_parallel_cross_entropy).
  // Throws InvalidArgument when slice.classes is not the vocabulary.
  [[nodiscard]] LossResult loss_over_vocabulary_slice(const Tensor& logits, const Tensor& targets,
                                                      const VocabularySlice& slice) const override;

  [[nodiscard]] const GptShape& shape() const noexcept { return shape_; }

 private:
  GptShape shape_;
  std::shared_ptr<const layers::ComputeContext> compute_;
  std::vector<std::unique_ptr<Layer>> layers_;
};

}  // namespace tessera::gpt
