#include "text/text_dataset.hpp"

#include <string>

#include "tessera/base/error.hpp"

namespace tessera::text {

std::size_t window_count(std::uint64_t part_tokens, std::size_t context) noexcept {
  if (context == 0 || part_tokens <= context) return 0;
  return static_cast<std::size_t>((part_tokens - 1) / context);
}

void copy_window(std::span<const std::uint8_t> part, std::size_t context, std::size_t index,
                 std::int64_t* inputs, std::int64_t* targets) {
  TESSERA_CHECK(index < window_count(part.size(), context),
                "window " + std::to_string(index) + " of " +
                    std::to_string(window_count(part.size(), context)));
  const std::uint8_t* window = part.data() + index * context;
  for (std::size_t t = 0; t < context; ++t) {
    inputs[t] = window[t];
    targets[t] = window[t + 1];
  }
}

TextDataset::TextDataset(const TextConfig& config) : file_(config.path), context_(config.context) {
  for (const Split split : {Split::train, Split::test}) {
    const auto tokens = part(split).size();
    if (window_count(tokens, context_) == 0) {
      throw DataError(
          config.path.string() + ": its " + (split == Split::train ? "training" : "validation") +
          " part holds " + std::to_string(tokens) +
          " tokens, too few for one window of context + 1 = " + std::to_string(context_ + 1) +
          "; use a smaller context or prepare a larger corpus");
    }
  }
}

TextDataset::TextDataset(const Options& options)
    : TextDataset(TextConfig{options.get_string("path"),
                             static_cast<std::size_t>(options.get_int("context"))}) {}

std::span<const std::uint8_t> TextDataset::part(Split split) const noexcept {
  const auto tokens = file_.tokens();
  const auto split_at = static_cast<std::size_t>(file_.header().split);
  return split == Split::train ? tokens.first(split_at) : tokens.subspan(split_at);
}

std::size_t TextDataset::size(Split split) const noexcept {
  return window_count(part(split).size(), context_);
}

Batch TextDataset::gather(Split split, std::span<const std::size_t> indices) const {
  const auto tokens = part(split);
  const std::size_t n = indices.size();
  Batch batch{Tensor({n, context_}, DType::i64), Tensor({n, context_}, DType::i64)};
  std::int64_t* inputs = batch.inputs.as<std::int64_t>().data();
  std::int64_t* targets = batch.targets.as<std::int64_t>().data();
  for (std::size_t r = 0; r < n; ++r) {
    copy_window(tokens, context_, indices[r], inputs + r * context_, targets + r * context_);
  }
  return batch;
}

}  // namespace tessera::text
