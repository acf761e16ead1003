#pragma once
// Byte-level language modelling over a prepared token file (token_file.hpp): sample i of a part
// is the window of context + 1 tokens starting at i * context; its inputs are the first context
// tokens, its targets the last context (the inputs shifted by one). Windows never cross from the
// training part into the validation part (Split::test).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

#include "tessera/plugin/dataset.hpp"
#include "tessera/plugin/options.hpp"
#include "text/corpus.hpp"
#include "text/token_file.hpp"

namespace tessera::text {

// How many windows of context + 1 tokens, `context` apart, fit in `part_tokens` tokens: the
// last window's last token is the part's last or before it. Each epoch every token is then a
// target once, except the part's first and a tail of (part_tokens - 1) % context tokens.
[[nodiscard]] std::size_t window_count(std::uint64_t part_tokens, std::size_t context) noexcept;

// Writes window `index` of `part` as `context` inputs and `context` targets (next tokens).
void copy_window(std::span<const std::uint8_t> part, std::size_t context, std::size_t index,
                 std::int64_t* inputs, std::int64_t* targets);

struct TextConfig {
  std::filesystem::path path = kDefaultTokenFile;
  std::size_t context = 256;
};

// Thread-safe (immutable after construction). The tokens stay in the mapped file.
class TextDataset final : public Dataset {
 public:
  // Maps and checks the file (MappedTokenFile) and refuses a part too short for one window,
  // naming the file. Throws DataError.
  explicit TextDataset(const TextConfig& config);
  explicit TextDataset(const Options& options);

  [[nodiscard]] std::size_t size(Split split) const noexcept override;
  // i64 [context] token ids in, [context] next tokens of 256 byte values out.
  [[nodiscard]] SampleLayout layout() const override {
    return {DType::i64, {context_}, {context_}, kByteVocabulary};
  }
  // One token is one byte of the corpus: evaluations report bits per byte.
  [[nodiscard]] double bytes_per_target() const noexcept override { return 1.0; }
  // inputs: i64 token ids [n, context]; targets: i64 next tokens [n, context].
  [[nodiscard]] Batch gather(Split split, std::span<const std::size_t> indices) const override;

  [[nodiscard]] std::span<const std::uint8_t> part(Split split) const noexcept;

 private:
  MappedTokenFile file_;
  std::size_t context_;
};

}  // namespace tessera::text
