#pragma once
// A small generated text as a Dataset of token windows, for the gpt model under the strategies
// (gpt_strategies_test.cpp, gpt_tensor_parallel_test.cpp).

#include <cstdint>
#include <vector>

#include "tessera/base/random.hpp"
#include "tessera/plugin/dataset.hpp"

namespace tessera::testing {

constexpr std::size_t kVocab = 29;  // a-z, space, '.', newline

// Sentences drawn word by word from a small vocabulary with a fixed seed, as token ids: text
// with structure a tiny transformer can learn. Windows of context + 1 tokens, one after another
// (stride context); sample i's targets are its inputs shifted by one. `classes` (at least
// kVocab) is the vocabulary the layout declares: a model of a larger vocabulary never sees the
// ids above kVocab - 1, which changes nothing else.
class GeneratedText final : public Dataset {
 public:
  GeneratedText(std::size_t context, std::size_t train, std::size_t test,
                std::size_t classes = kVocab)
      : context_(context), train_(train), test_(test), classes_(classes) {
    static const char* const kWords[] = {"the", "cat", "sat", "on",  "a",     "mat", "dog",
                                         "ran", "to",  "big", "red", "house", "and", "slept"};
    const std::size_t needed = (train + test) * context + 1;
    std::uint64_t k = 0;
    while (tokens_.size() < needed) {
      const std::size_t words = 3 + counter_random(7, 0, k++) % 5;
      for (std::size_t w = 0; w < words; ++w) {
        if (w > 0) tokens_.push_back(26);
        for (const char* c = kWords[counter_random(7, 1, k++) % 14]; *c != 0; ++c) {
          tokens_.push_back(*c - 'a');
        }
      }
      tokens_.push_back(27);
      tokens_.push_back(28);
    }
  }
  [[nodiscard]] std::size_t size(Split split) const noexcept override {
    return split == Split::train ? train_ : test_;
  }
  [[nodiscard]] SampleLayout layout() const override {
    return {DType::i64, {context_}, {context_}, classes_};
  }
  [[nodiscard]] Batch gather(Split split, std::span<const std::size_t> indices) const override {
    Batch batch{Tensor({indices.size(), context_}, DType::i64),
                Tensor({indices.size(), context_}, DType::i64)};
    const std::size_t first = split == Split::train ? 0 : train_;
    for (std::size_t r = 0; r < indices.size(); ++r) {
      const std::size_t start = (first + indices[r]) * context_;
      for (std::size_t t = 0; t < context_; ++t) {
        batch.inputs.as<std::int64_t>()[r * context_ + t] = tokens_[start + t];
        batch.targets.as<std::int64_t>()[r * context_ + t] = tokens_[start + t + 1];
      }
    }
    return batch;
  }

 private:
  std::size_t context_, train_, test_, classes_;
  std::vector<std::int64_t> tokens_;
};

}  // namespace tessera::testing
