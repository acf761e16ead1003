#pragma once
// Reduce operations a Communicator applies; the kernels that apply them on the CPU are in
// tessera/transport_kit/reduce.hpp.

#include <cstdint>
#include <string_view>

namespace tessera {

enum class ReduceOp : std::uint8_t { sum, avg, min, max, prod };

inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min,
                                             ReduceOp::max, ReduceOp::prod};

[[nodiscard]] std::string_view reduce_op_name(ReduceOp op) noexcept;
[[nodiscard]] ReduceOp parse_reduce_op(std::string_view name);

}  // namespace tessera
