#include "tessera/transport_kit/reduce.hpp"

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "tessera/base/error.hpp"

namespace tessera {

namespace {

// Signed overflow is undefined in C++; reductions wrap modulo 2^bits instead, the same way on
// every rank, by doing the arithmetic on the unsigned twin.
template <class T>
T wrap_add(T a, T b) noexcept {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}

template <class T>
T wrap_mul(T a, T b) noexcept {
  if constexpr (std::is_integral_v<T>) {
    // uint8_t * uint8_t promotes to int and could overflow int for wider types; widen first.
    using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

template <class T>
bool is_nan(T v) noexcept {
  if constexpr (std::is_floating_point_v<T>) {
    return v != v;
  } else {
    return false;
  }
}

// min and max propagate NaN, so a diverged gradient is never hidden by a finite peer.
struct Sum {
  template <class T>
  T operator()(T a, T b) const noexcept {
    return wrap_add(a, b);
  }
};
struct Prod {
  template <class T>
  T operator()(T a, T b) const noexcept {
    return wrap_mul(a, b);
  }
};
struct Min {
  template <class T>
  T operator()(T a, T b) const noexcept {
    return is_nan(a) ? a : (b < a || is_nan(b)) ? b : a;
  }
};
struct Max {
  template <class T>
  T operator()(T a, T b) const noexcept {
    return is_nan(a) ? a : (a < b || is_nan(b)) ? b : a;
  }
};

struct Bf16 {
  static float widen(std::uint16_t v) noexcept { return bf16_to_float(v); }
  static std::uint16_t narrow(float v) noexcept { return float_to_bf16(v); }
};
struct F16 {
  static float widen(std::uint16_t v) noexcept { return f16_to_float(v); }
  static std::uint16_t narrow(float v) noexcept { return float_to_f16(v); }
};

// Blocks of a fixed 64 bytes: a constant-trip inner loop is what GCC and Clang vectorise at
// -O2 (GCC's "very cheap" cost model refuses loops that need a scalar epilogue).
template <class T, class Op>
void combine_in_place(T* __restrict acc, const T* __restrict in, std::size_t n, Op op) noexcept {
  constexpr std::size_t kBlock = 64 / sizeof(T);
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (std::size_t j = 0; j < kBlock; ++j) acc[i + j] = op(acc[i + j], in[i + j]);
  }
  for (; i < n; ++i) acc[i] = op(acc[i], in[i]);
}

template <class T, class Op>
void combine_pair(T* __restrict out, const T* __restrict a, const T* __restrict b, std::size_t n,
                  Op op) noexcept {
  constexpr std::size_t kBlock = 64 / sizeof(T);
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (std::size_t j = 0; j < kBlock; ++j) out[i + j] = op(a[i + j], b[i + j]);
  }
  for (; i < n; ++i) out[i] = op(a[i], b[i]);
}

// out may equal a (the accumulate step) or b; restrict pointers must not alias, so each case
// gets the kernel whose pointers are distinct.
template <class T, class Op>
void combine(void* out, const void* a, const void* b, std::size_t n, Op op) noexcept {
  auto* o = static_cast<T*>(out);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  if (o == x && o == y) {
    for (std::size_t i = 0; i < n; ++i) o[i] = op(o[i], o[i]);
  } else if (o == x) {
    combine_in_place(o, y, n, op);
  } else if (o == y) {
    // op(a, b) keeps its argument order: min and max pick by position when values tie or are NaN.
    for (std::size_t i = 0; i < n; ++i) o[i] = op(x[i], o[i]);
  } else {
    combine_pair(o, x, y, n, op);
  }
}

// bf16/f16: widen to float, combine, round back, every step, so that a transport reducing in
// float and one reducing in 16 bits cannot both claim to follow this contract.
template <class Half, class Op>
void combine_half(void* out, const void* a, const void* b, std::size_t n, Op op) noexcept {
  auto* o = static_cast<std::uint16_t*>(out);
  const auto* x = static_cast<const std::uint16_t*>(a);
  const auto* y = static_cast<const std::uint16_t*>(b);
  for (std::size_t i = 0; i < n; ++i) o[i] = Half::narrow(op(Half::widen(x[i]), Half::widen(y[i])));
}

template <class Op>
void dispatch(void* out, const void* a, const void* b, std::size_t n, DType dtype, Op op) noexcept {
  switch (dtype) {
    case DType::f32: return combine<float>(out, a, b, n, op);
    case DType::f64: return combine<double>(out, a, b, n, op);
    case DType::i32: return combine<std::int32_t>(out, a, b, n, op);
    case DType::i64: return combine<std::int64_t>(out, a, b, n, op);
    case DType::u8: return combine<std::uint8_t>(out, a, b, n, op);
    case DType::bf16: return combine_half<Bf16>(out, a, b, n, op);
    case DType::f16: return combine_half<F16>(out, a, b, n, op);
  }
}

template <class T>
void divide(void* data, std::size_t n, int group_size) noexcept {
  auto* p = static_cast<T*>(data);
  const auto divisor = static_cast<T>(group_size);
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / divisor);
}

template <class Half>
void divide_half(void* data, std::size_t n, int group_size) noexcept {
  auto* p = static_cast<std::uint16_t*>(data);
  const auto divisor = static_cast<float>(group_size);
  for (std::size_t i = 0; i < n; ++i) p[i] = Half::narrow(Half::widen(p[i]) / divisor);
}

}  // namespace

std::string_view reduce_op_name(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::min: return "min";
    case ReduceOp::max: return "max";
    case ReduceOp::prod: return "prod";
  }
  return "?";
}

ReduceOp parse_reduce_op(std::string_view name) {
  for (ReduceOp op : kAllReduceOps) {
    if (name == reduce_op_name(op)) return op;
  }
  if (name == "mean" || name == "average") return ReduceOp::avg;
  if (name == "product") return ReduceOp::prod;
  throw InvalidArgument("unknown reduce op '" + std::string(name) +
                        "' (valid: sum, avg, min, max, prod)");
}

void reduce_pair(void* out, const void* a, const void* b, std::size_t count, DType dtype,
                 ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return dispatch(out, a, b, count, dtype, Sum{});
    case ReduceOp::prod: return dispatch(out, a, b, count, dtype, Prod{});
    case ReduceOp::min: return dispatch(out, a, b, count, dtype, Min{});
    case ReduceOp::max: return dispatch(out, a, b, count, dtype, Max{});
  }
}

void reduce_into(void* acc, const void* in, std::size_t count, DType dtype, ReduceOp op) noexcept {
  reduce_pair(acc, acc, in, count, dtype, op);
}

void finish_average(void* data, std::size_t count, DType dtype, ReduceOp op,
                    int group_size) noexcept {
  if (op != ReduceOp::avg || group_size == 1) return;
  switch (dtype) {
    case DType::f32: return divide<float>(data, count, group_size);
    case DType::f64: return divide<double>(data, count, group_size);
    case DType::i32: return divide<std::int32_t>(data, count, group_size);
    case DType::i64: return divide<std::int64_t>(data, count, group_size);
    case DType::u8: return divide<std::uint8_t>(data, count, group_size);
    case DType::bf16: return divide_half<Bf16>(data, count, group_size);
    case DType::f16: return divide_half<F16>(data, count, group_size);
  }
}

}  // namespace tessera
