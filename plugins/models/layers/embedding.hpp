#pragma once
// GPT-2's input embedding: a token embedding plus a learned position embedding, forward and
// backward side by side over spans (llm.c's encoder_forward / encoder_backward).
//
// Layouts (row-major):
//   tokens                        : [batch, time]            i64 ids in [0, vocab)
//   token_table, grad_token_table : [vocab, channels]        (wte; GPT-2 ties it to the output
//   head) position_table, grad_position : [context, channels]      (wpe), time <= context output,
//   grad_output           : [batch, time, channels] output[b, t, :] = token_table[tokens[b, t], :]
//   + position_table[t, :]
//
// Backward ADDS (+=) into both tables (a tied table also collects the output head's gradient).
// Real is float or double. The same bits at any thread count: each thread owns a block of
// channels and visits the positions in order, so a row used by several tokens sums them in
// (b, t) order whatever the split.

#include <cstddef>
#include <cstdint>
#include <span>

#include "layers/compute_context.hpp"
#include "tessera/base/tensor.hpp"

namespace tessera::layers {

struct EmbeddingShape {
  std::size_t batch = 0;
  std::size_t time = 0;
  std::size_t channels = 0;
  std::size_t vocab = 0;
  std::size_t context = 0;  // rows of the position table; time <= context
  // Vocabulary-parallel (Megatron): the token table holds rows [first_token, first_token +
  // table_rows) of the vocabulary only, a tensor rank's; the other ids' rows are on other ranks.
  // table_rows 0: the whole table.
  std::size_t first_token = 0;
  std::size_t table_rows = 0;

  [[nodiscard]] std::size_t rows() const noexcept { return table_rows == 0 ? vocab : table_rows; }
  [[nodiscard]] bool holds(std::int64_t token) const noexcept {
    const auto t = static_cast<std::size_t>(token);
    return t >= first_token && t < first_token + rows();
  }
};

// The whole lookup, wte[token] + wpe[t]: the token table whole (table_rows 0). Throws
// InvalidArgument for a token outside [0, vocab), naming its (b, t), or wrong sizes.
template <class Real>
void embedding_forward(std::span<Real> output, std::span<const std::int64_t> tokens,
                       std::span<const Real> token_table, std::span<const Real> position_table,
                       const EmbeddingShape& shape, const ComputeContext& compute);

// A tensor rank's part of the lookup over a slice of the token table: output[b, t, :] =
// token_table[tokens[b, t] - first_token, :] for the ids the slice holds, 0 for the others, so
// that the tensor group's sum of the ranks' outputs is wte[token] with the whole table's bits;
// then add_position_embedding adds wpe[t] once. Checks as embedding_forward.
template <class Real>
void token_embedding_forward(std::span<Real> output, std::span<const std::int64_t> tokens,
                             std::span<const Real> token_table, const EmbeddingShape& shape,
                             const ComputeContext& compute);
template <class Real>
void add_position_embedding(std::span<Real> output, std::span<const Real> position_table,
                            const EmbeddingShape& shape, const ComputeContext& compute);

// Adds into the token table's rows (the slice's, for ids it holds; no other id adds anything)
// and the position table's (every position).
template <class Real>
void embedding_backward(std::span<Real> grad_token_table, std::span<Real> grad_position_table,
                        std::span<const Real> grad_output, std::span<const std::int64_t> tokens,
                        const EmbeddingShape& shape, const ComputeContext& compute);

// The same kernels over a Tensor of token ids [batch, time] (on the host or on the tables'
// device) and views of the tables, on the host or on a CUDA device (device_compute.hpp): the
// device is the tables'. The ids are checked on the host (a copy where they lie on the device)
// before a kernel reads a row, with the span kernels' message. Forward returns
// [batch, time, channels] on the tables' device; backward adds into the table gradients, on a GPU
// with the host's bits (each row's sum in token order).
[[nodiscard]] Tensor embedding_forward(const Tensor& tokens, const BufferView& token_table,
                                       const BufferView& position_table,
                                       const EmbeddingShape& shape, const ComputeContext& compute);
void embedding_backward(const BufferView& grad_token_table, const BufferView& grad_position_table,
                        const Tensor& grad_output, const Tensor& tokens,
                        const EmbeddingShape& shape, const ComputeContext& compute);

}  // namespace tessera::layers
