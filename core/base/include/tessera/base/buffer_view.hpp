#pragma once
// A non-owning view of typed memory: what every Communicator operation reads and writes.

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "tessera/base/dtype.hpp"

namespace tessera {

// Pointer + element count + dtype + device. Copying a view never copies data; whoever made the
// view keeps the memory alive for as long as any operation using it is in flight.
struct BufferView {
  void* data = nullptr;
  std::size_t count = 0;  // elements, not bytes
  DType dtype = DType::f32;
  Device device = Device::cpu();

  [[nodiscard]] std::size_t bytes() const noexcept { return count * dtype_size(dtype); }
  [[nodiscard]] std::byte* byte_data() const noexcept { return static_cast<std::byte*>(data); }

  // The elements as host memory of type T; throws InvalidArgument, naming `what`, when the view
  // is on a device or holds another dtype.
  template <class T>
  [[nodiscard]] std::span<T> host_span(const char* what) const;

  // Elements [offset, offset + n) of this view.
  [[nodiscard]] BufferView slice(std::size_t offset, std::size_t n) const noexcept {
    return {byte_data() + offset * dtype_size(dtype), n, dtype, device};
  }
};

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct dtype_of<std::int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct dtype_of<std::uint8_t> {
  static constexpr DType value = DType::u8;
};

void check_host_view(const BufferView& view, DType wanted, const char* what);

template <class T>
std::span<T> BufferView::host_span(const char* what) const {
  check_host_view(*this, dtype_of<std::remove_const_t<T>>::value, what);
  return {static_cast<T*>(data), count};
}

// A CPU view of a span of a plain arithmetic type.
template <class T>
[[nodiscard]] BufferView view_of(std::span<T> values) noexcept {
  return {const_cast<std::remove_const_t<T>*>(values.data()), values.size(),
          dtype_of<std::remove_const_t<T>>::value, Device::cpu()};
}

}  // namespace tessera
