#include "reference.hpp"

#include <cstring>
#include <type_traits>

namespace tessera::conformance {

namespace {

std::uint64_t mix(std::uint64_t x) {  // splitmix64: cheap, well spread, the same everywhere
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

template <class T>
void store_at(Bytes& bytes, std::size_t i, T value) {
  std::memcpy(bytes.data() + i * sizeof(T), &value, sizeof(T));
}

template <class T>
T load_at(const Bytes& bytes, std::size_t i) {
  T value;
  std::memcpy(&value, bytes.data() + i * sizeof(T), sizeof(T));
  return value;
}

// Plain values of each dtype as the arithmetic type the reduction runs in.
template <class T>
T combine(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return static_cast<T>(a + b);
    case ReduceOp::prod: return static_cast<T>(a * b);
    case ReduceOp::min: return b < a ? b : a;
    case ReduceOp::max: return a < b ? b : a;
  }
  return a;
}

template <class T>
Bytes reduce_plain(const std::vector<Bytes>& inputs, ReduceOp op, std::size_t offset,
                   std::size_t count) {
  Bytes out(count * sizeof(T));
  const auto n = static_cast<T>(inputs.size());
  for (std::size_t i = 0; i < count; ++i) {
    T acc = load_at<T>(inputs[0], offset + i);
    for (std::size_t r = 1; r < inputs.size(); ++r)
      acc = combine(acc, load_at<T>(inputs[r], offset + i), op);
    if (op == ReduceOp::avg) acc = static_cast<T>(acc / n);
    store_at(out, i, acc);
  }
  return out;
}

template <float (*widen)(std::uint16_t), std::uint16_t (*narrow)(float)>
Bytes reduce_half(const std::vector<Bytes>& inputs, ReduceOp op, std::size_t offset,
                  std::size_t count) {
  Bytes out(count * 2);
  const auto n = static_cast<float>(inputs.size());
  for (std::size_t i = 0; i < count; ++i) {
    std::uint16_t acc = load_at<std::uint16_t>(inputs[0], offset + i);
    for (std::size_t r = 1; r < inputs.size(); ++r) {
      acc = narrow(combine(widen(acc), widen(load_at<std::uint16_t>(inputs[r], offset + i)), op));
    }
    if (op == ReduceOp::avg) acc = narrow(widen(acc) / n);
    store_at(out, i, acc);
  }
  return out;
}

}  // namespace

Bytes make_values(DType dtype, std::size_t count, std::uint64_t seed) {
  Bytes bytes(count * dtype_size(dtype));
  const std::uint64_t base = mix(seed);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t h = mix(base + i);
    const float fraction = static_cast<float>(h >> 40) * (4.0F / 16777216.0F) - 2.0F;
    const auto small = static_cast<std::int64_t>(h % 11) - 5;
    switch (dtype) {
      case DType::f32: store_at(bytes, i, fraction); break;
      case DType::f64: store_at(bytes, i, static_cast<double>(fraction) / 3.0); break;
      case DType::bf16: store_at(bytes, i, float_to_bf16(fraction)); break;
      case DType::f16: store_at(bytes, i, float_to_f16(fraction)); break;
      case DType::i32: store_at(bytes, i, static_cast<std::int32_t>(small)); break;
      case DType::i64: store_at(bytes, i, small); break;
      case DType::u8: store_at(bytes, i, static_cast<std::uint8_t>(h % 10)); break;
    }
  }
  return bytes;
}

Bytes reference_reduce(const std::vector<Bytes>& inputs, DType dtype, ReduceOp op,
                       std::size_t offset, std::size_t count) {
  switch (dtype) {
    case DType::f32: return reduce_plain<float>(inputs, op, offset, count);
    case DType::f64: return reduce_plain<double>(inputs, op, offset, count);
    case DType::i32: return reduce_plain<std::int32_t>(inputs, op, offset, count);
    case DType::i64: return reduce_plain<std::int64_t>(inputs, op, offset, count);
    case DType::u8: return reduce_plain<std::uint8_t>(inputs, op, offset, count);
    case DType::bf16: return reduce_half<bf16_to_float, float_to_bf16>(inputs, op, offset, count);
    case DType::f16: return reduce_half<f16_to_float, float_to_f16>(inputs, op, offset, count);
  }
  return {};
}

std::string first_difference(const Bytes& actual, const Bytes& expected, DType dtype) {
  if (actual == expected) return "";
  if (actual.size() != expected.size()) {
    return "size " + std::to_string(actual.size()) + " bytes, expected " +
           std::to_string(expected.size());
  }
  const std::size_t width = dtype_size(dtype);
  for (std::size_t i = 0; i < actual.size() / width; ++i) {
    if (std::memcmp(actual.data() + i * width, expected.data() + i * width, width) == 0) continue;
    std::string a;
    std::string e;
    for (std::size_t b = 0; b < width; ++b) {
      a += std::to_string(static_cast<int>(actual[i * width + b])) + " ";
      e += std::to_string(static_cast<int>(expected[i * width + b])) + " ";
    }
    return "element " + std::to_string(i) + ": bytes [" + a + "] expected [" + e + "]";
  }
  return "";
}

}  // namespace tessera::conformance
