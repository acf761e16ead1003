#include "layers/embedding.hpp"

#include <string>

#include "layers/kernel_support.hpp"

namespace tessera::layers {
namespace {

void check_tokens(std::span<const std::int64_t> tokens, const EmbeddingShape& shape) {
  TESSERA_CHECK(shape.channels > 0, "embedding: channels must be positive");
  TESSERA_CHECK(shape.time <= shape.context,
                "embedding: " + std::to_string(shape.time) + " positions exceed the context of " +
                    std::to_string(shape.context) + "; use sequences of at most the context");
  require_size("embedding", "tokens", tokens, shape.batch * shape.time);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= 0 && static_cast<std::size_t>(tokens[i]) < shape.vocab) continue;
    throw InvalidArgument("embedding: token " + std::to_string(tokens[i]) + " at batch " +
                          std::to_string(i / shape.time) + ", position " +
                          std::to_string(i % shape.time) + " is outside the vocabulary [0, " +
                          std::to_string(shape.vocab) + ")");
  }
}

template <class Real>
void check_tables(std::span<Real> token_table, std::span<Real> position_table,
                  const EmbeddingShape& shape) {
  require_size("embedding", "token table", token_table, shape.vocab * shape.channels);
  require_size("embedding", "position table", position_table, shape.context * shape.channels);
}

}  // namespace

template <class Real>
void embedding_forward(std::span<Real> output, std::span<const std::int64_t> tokens,
                       std::span<const Real> token_table, std::span<const Real> position_table,
                       const EmbeddingShape& shape, const ComputeContext& compute) {
  check_tokens(tokens, shape);
  check_tables(token_table, position_table, shape);
  const std::size_t channels = shape.channels;
  require_size("embedding", "output", output, tokens.size() * channels);
  compute.parallel_for(tokens.size(), grain_for(channels), [&](std::size_t i0, std::size_t i1) {
    for (std::size_t i = i0; i < i1; ++i) {
      const Real* token_row = token_table.data() + static_cast<std::size_t>(tokens[i]) * channels;
      const Real* position_row = position_table.data() + (i % shape.time) * channels;
      Real* out = output.data() + i * channels;
      for (std::size_t c = 0; c < channels; ++c) out[c] = token_row[c] + position_row[c];
    }
  });
}

template <class Real>
void embedding_backward(std::span<Real> grad_token_table, std::span<Real> grad_position_table,
                        std::span<const Real> grad_output, std::span<const std::int64_t> tokens,
                        const EmbeddingShape& shape, const ComputeContext& compute) {
  check_tokens(tokens, shape);
  check_tables(grad_token_table, grad_position_table, shape);
  const std::size_t channels = shape.channels;
  require_size("embedding", "grad_output", grad_output, tokens.size() * channels);
  compute.parallel_for(channels, std::max<std::size_t>(16, grain_for(2 * tokens.size())),
                       [&](std::size_t c0, std::size_t c1) {
                         for (std::size_t i = 0; i < tokens.size(); ++i) {
                           const Real* dy = grad_output.data() + i * channels;
                           Real* token_row = grad_token_table.data() +
                                             static_cast<std::size_t>(tokens[i]) * channels;
                           Real* position_row =
                               grad_position_table.data() + (i % shape.time) * channels;
                           for (std::size_t c = c0; c < c1; ++c) {
                             token_row[c] += dy[c];
                             position_row[c] += dy[c];
                           }
                         }
                       });
}

template void embedding_forward<float>(std::span<float>, std::span<const std::int64_t>,
                                       std::span<const float>, std::span<const float>,
                                       const EmbeddingShape&, const ComputeContext&);
template void embedding_forward<double>(std::span<double>, std::span<const std::int64_t>,
                                        std::span<const double>, std::span<const double>,
                                        const EmbeddingShape&, const ComputeContext&);
template void embedding_backward<float>(std::span<float>, std::span<float>, std::span<const float>,
                                        std::span<const std::int64_t>, const EmbeddingShape&,
                                        const ComputeContext&);
template void embedding_backward<double>(std::span<double>, std::span<double>,
                                         std::span<const double>, std::span<const std::int64_t>,
                                         const EmbeddingShape&, const ComputeContext&);

}  // namespace tessera::layers
