#pragma once
// An owning, contiguous tensor on one device: shape plus storage from a DeviceAllocator (the
// host's unless one is given). Small on purpose; the framework moves flat views around and only
// layers care about shapes.

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/base/buffer_view.hpp"
#include "tessera/base/device_allocator.hpp"

namespace tessera {

using Shape = std::vector<std::size_t>;

[[nodiscard]] std::size_t element_count(const Shape& shape) noexcept;
// "8x64", or "scalar" for an empty shape: how messages name a shape.
[[nodiscard]] std::string shape_text(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  ~Tensor() = default;
  // Zero-initialised storage of element_count(shape) elements on the allocator's device,
  // kDeviceAlignment-aligned. Throws OutOfMemory.
  Tensor(Shape shape, DType dtype);
  Tensor(Shape shape, DType dtype, std::shared_ptr<DeviceAllocator> allocator);

  [[nodiscard]] const Shape& shape() const noexcept { return shape_; }
  [[nodiscard]] DType dtype() const noexcept { return dtype_; }
  [[nodiscard]] std::size_t count() const noexcept { return count_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return count_ * dtype_size(dtype_); }
  [[nodiscard]] Device device() const noexcept { return device_; }
  // Where the storage came from (null for a default-constructed tensor): the allocator that
  // makes more memory on the same device, and copies to and from it.
  [[nodiscard]] const std::shared_ptr<DeviceAllocator>& allocator() const noexcept {
    return allocator_;
  }
  [[nodiscard]] BufferView view() const noexcept {
    return {storage_.get(), count_, dtype_, device_};
  }

  // A new tensor of the same shape and contents on the allocator's device (a copy, even when
  // the device is the same).
  [[nodiscard]] Tensor copy_to(std::shared_ptr<DeviceAllocator> allocator) const;

  // A second handle to the same storage (no copy): how a layer keeps its input or output for
  // backward. Writes through either handle are seen by both; the memory lives until the last
  // handle dies.
  [[nodiscard]] Tensor alias() const;

  // This tensor under another shape of the same element count (no copy; the tensor moves):
  // `x.alias().reshaped({rows, width})` reads [n, T, width] activations as a matrix. Throws
  // InvalidArgument when the counts differ.
  [[nodiscard]] Tensor reshaped(Shape shape) &&;

  // Typed host access; throws InvalidArgument if T does not match dtype() or the tensor is not
  // in host memory (copy_to(cpu_allocator()) first).
  template <class T>
  [[nodiscard]] std::span<T> as() const {
    check_host_access(dtype_of<T>::value);
    return {static_cast<T*>(storage_.get()), count_};
  }

 private:
  void check_host_access(DType wanted) const;

  Shape shape_;
  DType dtype_ = DType::f32;
  std::size_t count_ = 0;
  Device device_ = Device::cpu();
  std::shared_ptr<DeviceAllocator> allocator_;  // null only for a default-constructed tensor
  // Shared only through alias(); Tensor itself stays move-only so copies are always explicit.
  std::shared_ptr<void> storage_;
};

}  // namespace tessera
