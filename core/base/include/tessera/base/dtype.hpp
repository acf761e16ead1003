#pragma once
// Element types and devices: the vocabulary every buffer, transport and kernel shares.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera {

enum class DType : std::uint8_t { f32, f64, bf16, f16, i32, i64, u8 };

inline constexpr DType kAllDTypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16,
                                       DType::i32, DType::i64, DType::u8};

// Bytes per element.
[[nodiscard]] constexpr std::size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::f64:
    case DType::i64: return 8;
    case DType::f32:
    case DType::i32: return 4;
    case DType::bf16:
    case DType::f16: return 2;
    case DType::u8: return 1;
  }
  return 0;
}

[[nodiscard]] std::string_view dtype_name(DType t) noexcept;
// Parses "f32", "float32", "bf16", ...; throws InvalidArgument naming the valid spellings.
[[nodiscard]] DType parse_dtype(std::string_view name);

// IEEE half and bfloat16 conversions (round to nearest even), used by reductions and by
// gradient compression. Plain functions so that any plugin can share them.
[[nodiscard]] float bf16_to_float(std::uint16_t bits) noexcept;
[[nodiscard]] std::uint16_t float_to_bf16(float value) noexcept;
[[nodiscard]] float f16_to_float(std::uint16_t bits) noexcept;
[[nodiscard]] std::uint16_t float_to_f16(float value) noexcept;

enum class DeviceType : std::uint8_t { cpu, cuda };

// Where a buffer lives. cuda devices carry an ordinal.
struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static constexpr Device cpu() noexcept { return {}; }
  static constexpr Device cuda(int ordinal) noexcept { return {DeviceType::cuda, ordinal}; }
  friend constexpr bool operator==(Device, Device) = default;
};

// "cpu" or "cuda:N".
[[nodiscard]] std::string to_string(Device device);

}  // namespace tessera
