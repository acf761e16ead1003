#include "tessera/base/dtype.hpp"

#include <bit>
#include <cmath>
#include <string>

#include "tessera/base/error.hpp"

namespace tessera {

std::string_view dtype_name(DType t) noexcept {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  for (DType t : kAllDTypes) {
    if (name == dtype_name(t)) return t;
  }
  if (name == "float32" || name == "float") return DType::f32;
  if (name == "float64" || name == "double") return DType::f64;
  if (name == "bfloat16") return DType::bf16;
  if (name == "float16" || name == "half") return DType::f16;
  if (name == "int32") return DType::i32;
  if (name == "int64") return DType::i64;
  if (name == "uint8") return DType::u8;
  throw InvalidArgument("unknown dtype '" + std::string(name) +
                        "' (valid: f32, f64, bf16, f16, i32, i64, u8)");
}

float bf16_to_float(std::uint16_t bits) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

std::uint16_t float_to_bf16(float value) noexcept {
  const auto u = std::bit_cast<std::uint32_t>(value);
  if (std::isnan(value)) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // stay a NaN
  const std::uint32_t rounding = 0x7FFF + ((u >> 16) & 1);  // round to nearest, ties to even
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}

float f16_to_float(std::uint16_t bits) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1F;
  const std::uint32_t mantissa = bits & 0x3FF;
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000 | (mantissa << 13));
  if (exponent == 0) {
    // Zero or subnormal: value = mantissa * 2^-24.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

std::uint16_t float_to_f16(float value) noexcept {
  const auto u = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000);
  const float magnitude = std::fabs(value);
  if (std::isnan(value)) return static_cast<std::uint16_t>(sign | 0x7E00);
  if (magnitude >= 65520.0F) return static_cast<std::uint16_t>(sign | 0x7C00);  // rounds to inf
  if (magnitude < 6.103515625e-05F) {
    // Subnormal range: scale so that one unit is 2^-24 and round to nearest even.
    const float scaled = magnitude * 16777216.0F;
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::nearbyint(scaled)));
  }
  const std::uint32_t abs = u & 0x7FFFFFFF;
  const std::uint32_t rounding = 0xFFF + ((abs >> 13) & 1);
  const std::uint32_t rounded = abs + rounding;
  return static_cast<std::uint16_t>(sign | (((rounded >> 23) - 112) << 10) |
                                    ((rounded >> 13) & 0x3FF));
}

std::string to_string(Device device) {
  return device.type == DeviceType::cpu ? std::string("cpu")
                                        : "cuda:" + std::to_string(device.index);
}

}  // namespace tessera
