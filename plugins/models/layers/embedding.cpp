#include "layers/embedding.hpp"

#include <algorithm>
#include <string>

#include "layers/kernel_support.hpp"
#include "layers/layer_checks.hpp"

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
void check_token_table(std::span<Real> token_table, const EmbeddingShape& shape) {
  TESSERA_CHECK(shape.first_token + shape.rows() <= shape.vocab,
                "embedding: token rows [" + std::to_string(shape.first_token) + ", " +
                    std::to_string(shape.first_token + shape.rows()) + ") exceed the vocabulary " +
                    std::to_string(shape.vocab));
  require_size("embedding", "token table", token_table, shape.rows() * shape.channels);
}

template <class Real>
void check_position_table(std::span<Real> position_table, const EmbeddingShape& shape) {
  require_size("embedding", "position table", position_table, shape.context * shape.channels);
}

}  // namespace

template <class Real>
void embedding_forward(std::span<Real> output, std::span<const std::int64_t> tokens,
                       std::span<const Real> token_table, std::span<const Real> position_table,
                       const EmbeddingShape& shape, const ComputeContext& compute) {
  TESSERA_CHECK(shape.rows() == shape.vocab,
                "embedding_forward: needs the whole token table; a slice of it looks up with "
                "token_embedding_forward, then add_position_embedding");
  check_tokens(tokens, shape);
  check_token_table(token_table, shape);
  check_position_table(position_table, shape);
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
void token_embedding_forward(std::span<Real> output, std::span<const std::int64_t> tokens,
                             std::span<const Real> token_table, const EmbeddingShape& shape,
                             const ComputeContext& compute) {
  check_tokens(tokens, shape);
  check_token_table(token_table, shape);
  const std::size_t channels = shape.channels;
  require_size("embedding", "output", output, tokens.size() * channels);
  compute.parallel_for(tokens.size(), grain_for(channels), [&](std::size_t i0, std::size_t i1) {
    for (std::size_t i = i0; i < i1; ++i) {
      Real* out = output.data() + i * channels;
      if (!shape.holds(tokens[i])) {
        std::fill(out, out + channels, Real(0));
        continue;
      }
      const Real* token_row =
          token_table.data() + (static_cast<std::size_t>(tokens[i]) - shape.first_token) * channels;
      std::copy(token_row, token_row + channels, out);
    }
  });
}

template <class Real>
void add_position_embedding(std::span<Real> output, std::span<const Real> position_table,
                            const EmbeddingShape& shape, const ComputeContext& compute) {
  check_position_table(position_table, shape);
  const std::size_t channels = shape.channels;
  const std::size_t count = shape.batch * shape.time;
  require_size("embedding", "output", output, count * channels);
  compute.parallel_for(count, grain_for(channels), [&](std::size_t i0, std::size_t i1) {
    for (std::size_t i = i0; i < i1; ++i) {
      const Real* position_row = position_table.data() + (i % shape.time) * channels;
      Real* out = output.data() + i * channels;
      for (std::size_t c = 0; c < channels; ++c) out[c] += position_row[c];
    }
  });
}

template <class Real>
void embedding_backward(std::span<Real> grad_token_table, std::span<Real> grad_position_table,
                        std::span<const Real> grad_output, std::span<const std::int64_t> tokens,
                        const EmbeddingShape& shape, const ComputeContext& compute) {
  check_tokens(tokens, shape);
  check_token_table(grad_token_table, shape);
  check_position_table(grad_position_table, shape);
  const std::size_t channels = shape.channels;
  require_size("embedding", "grad_output", grad_output, tokens.size() * channels);
  compute.parallel_for(
      channels, std::max<std::size_t>(16, grain_for(2 * tokens.size())),
      [&](std::size_t c0, std::size_t c1) {
        for (std::size_t i = 0; i < tokens.size(); ++i) {
          const Real* dy = grad_output.data() + i * channels;
          Real* position_row = grad_position_table.data() + (i % shape.time) * channels;
          for (std::size_t c = c0; c < c1; ++c) position_row[c] += dy[c];
          if (!shape.holds(tokens[i])) continue;
          Real* token_row = grad_token_table.data() +
                            (static_cast<std::size_t>(tokens[i]) - shape.first_token) * channels;
          for (std::size_t c = c0; c < c1; ++c) token_row[c] += dy[c];
        }
      });
}

template void embedding_forward<float>(std::span<float>, std::span<const std::int64_t>,
                                       std::span<const float>, std::span<const float>,
                                       const EmbeddingShape&, const ComputeContext&);
template void embedding_forward<double>(std::span<double>, std::span<const std::int64_t>,
                                        std::span<const double>, std::span<const double>,
                                        const EmbeddingShape&, const ComputeContext&);
template void token_embedding_forward<float>(std::span<float>, std::span<const std::int64_t>,
                                             std::span<const float>, const EmbeddingShape&,
                                             const ComputeContext&);
template void token_embedding_forward<double>(std::span<double>, std::span<const std::int64_t>,
                                              std::span<const double>, const EmbeddingShape&,
                                              const ComputeContext&);
template void add_position_embedding<float>(std::span<float>, std::span<const float>,
                                            const EmbeddingShape&, const ComputeContext&);
template void add_position_embedding<double>(std::span<double>, std::span<const double>,
                                             const EmbeddingShape&, const ComputeContext&);
template void embedding_backward<float>(std::span<float>, std::span<float>, std::span<const float>,
                                        std::span<const std::int64_t>, const EmbeddingShape&,
                                        const ComputeContext&);
template void embedding_backward<double>(std::span<double>, std::span<double>,
                                         std::span<const double>, std::span<const std::int64_t>,
                                         const EmbeddingShape&, const ComputeContext&);

namespace {

// The ids on the host (an alias there, else a copy), checked against the shape; `device` is the
// tables', where the ids must be unless they are on the host.
Tensor checked_host_tokens(const Tensor& tokens, const EmbeddingShape& shape, Device device) {
  TESSERA_CHECK(tokens.dtype() == DType::i64,
                "embedding: expects i64 token ids, got " + std::string(dtype_name(tokens.dtype())));
  if (tokens.device() != Device::cpu()) {
    check_same_device("embedding", "the token tensor", tokens, device);
  }
  Tensor host = tokens.device() == Device::cpu() ? tokens.alias() : tokens.copy_to(cpu_allocator());
  check_tokens(host.as<std::int64_t>(), shape);
  return host;
}

// The device the tables are on, and their sizes checked there.
Device checked_tables(const BufferView& token_table, const BufferView& position_table,
                      const EmbeddingShape& shape, const char* token_name,
                      const char* position_name) {
  const Device device = token_table.device;
  if (device != Device::cpu()) device::require_computes_on(device, "embedding");
  check_floats("embedding", token_name, token_table, shape.vocab * shape.channels, device);
  check_floats("embedding", position_name, position_table, shape.context * shape.channels, device);
  return device;
}

}  // namespace

Tensor embedding_forward(const Tensor& tokens, const BufferView& token_table,
                         const BufferView& position_table, const EmbeddingShape& shape,
                         const ComputeContext& compute) {
  const Device device =
      checked_tables(token_table, position_table, shape, "token table", "position table");
  const Tensor host_tokens = checked_host_tokens(tokens, shape, device);
  if (device != Device::cpu()) {
    return device::embedding_forward(tokens, host_tokens.as<std::int64_t>(),
                                     static_cast<const float*>(token_table.data),
                                     static_cast<const float*>(position_table.data), shape, device);
  }
  Tensor output({shape.batch, shape.time, shape.channels}, DType::f32);
  embedding_forward<float>(output.as<float>(), host_tokens.as<std::int64_t>(),
                           token_table.host_span<const float>("token table"),
                           position_table.host_span<const float>("position table"), shape, compute);
  return output;
}

void embedding_backward(const BufferView& grad_token_table, const BufferView& grad_position_table,
                        const Tensor& grad_output, const Tensor& tokens,
                        const EmbeddingShape& shape, const ComputeContext& compute) {
  const Device device = checked_tables(grad_token_table, grad_position_table, shape,
                                       "token table gradient", "position table gradient");
  const Tensor host_tokens = checked_host_tokens(tokens, shape, device);
  check_floats("embedding", "grad_output", grad_output.view(),
               shape.batch * shape.time * shape.channels, device);
  if (device != Device::cpu()) {
    device::embedding_backward(static_cast<float*>(grad_token_table.data),
                               static_cast<float*>(grad_position_table.data), grad_output,
                               host_tokens.as<std::int64_t>(), shape);
    return;
  }
  embedding_backward<float>(grad_token_table.host_span<float>("token table gradient"),
                            grad_position_table.host_span<float>("position table gradient"),
                            grad_output.as<float>(), host_tokens.as<std::int64_t>(), shape,
                            compute);
}

}  // namespace tessera::layers
