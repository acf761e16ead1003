#pragma once
// Test data and the straightforward reference every transport's results must equal bit for bit.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/base/buffer_view.hpp"
#include "tessera/transport_kit/reduce.hpp"

namespace tessera::conformance {

using Bytes = std::vector<std::byte>;

[[nodiscard]] inline BufferView view(Bytes& bytes, DType dtype) {
  return {bytes.data(), bytes.size() / dtype_size(dtype), dtype, Device::cpu()};
}

// `count` deterministic values for `seed`: fractional floats in [-2, 2), integers in [-5, 5]
// (u8 in [0, 9]), so a product over eight ranks neither overflows nor underflows, while float
// sums still round differently in a different order.
[[nodiscard]] Bytes make_values(DType dtype, std::size_t count, std::uint64_t seed);

// Elements [offset, offset + count) reduced over inputs in rank order, acc = op(acc, x_r), 16-bit
// floats widened and rounded back every step, avg divided at the end. Written element by
// element, independently of the library's kernels.
[[nodiscard]] Bytes reference_reduce(const std::vector<Bytes>& inputs, DType dtype, ReduceOp op,
                                     std::size_t offset, std::size_t count);

// "" when equal, else the first differing element with both values, for failure messages.
[[nodiscard]] std::string first_difference(const Bytes& actual, const Bytes& expected, DType dtype);

}  // namespace tessera::conformance
