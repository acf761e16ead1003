#pragma once
// The element-wise reduce kernels every CPU transport shares. Sharing one
// kernel is what makes transports agree bit for bit: each combines contributions in rank
// order, acc = op(acc, x_r), with bf16/f16 widened to float and rounded back at every step.

#include <cstddef>

#include "tessera/base/buffer_view.hpp"
#include "tessera/plugin/reduce_op.hpp"

namespace tessera {

// acc[i] = op(acc[i], in[i]) for i < count. avg accumulates like sum; finish_average divides.
// acc and in may not overlap unless equal. Thread-safe on disjoint ranges.
void reduce_into(void* acc, const void* in, std::size_t count, DType dtype, ReduceOp op) noexcept;

// out[i] = op(a[i], b[i]): the first step of a reduction, saving a copy into acc.
void reduce_pair(void* out, const void* a, const void* b, std::size_t count, DType dtype,
                 ReduceOp op) noexcept;

// For ReduceOp::avg: data[i] /= group_size (integer division for integer types). A no-op for
// every other op, so callers may call it unconditionally at the end of a reduction.
void finish_average(void* data, std::size_t count, DType dtype, ReduceOp op,
                    int group_size) noexcept;

}  // namespace tessera
