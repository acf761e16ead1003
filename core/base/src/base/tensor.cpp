#include "tessera/base/tensor.hpp"

#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <numeric>
#include <string>
#include <utility>

#include "tessera/base/error.hpp"

namespace tessera {

std::size_t element_count(const Shape& shape) noexcept {
  return std::accumulate(shape.begin(), shape.end(), std::size_t{1}, std::multiplies<>());
}

std::string shape_text(const Shape& shape) {
  std::string text;
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? "x" : "") + std::to_string(shape[i]);
  return text.empty() ? "scalar" : text;
}

Tensor::Tensor(Shape shape, DType dtype) : Tensor(std::move(shape), dtype, cpu_allocator()) {}

Tensor::Tensor(Shape shape, DType dtype, std::shared_ptr<DeviceAllocator> allocator)
    : shape_(std::move(shape)), dtype_(dtype), count_(element_count(shape_)) {
  TESSERA_CHECK(allocator != nullptr, "Tensor: no allocator");
  device_ = allocator->device();
  allocator_ = allocator;
  const std::size_t bytes = count_ * dtype_size(dtype_);
  void* p = allocator->allocate(bytes);
  // The deleter keeps the allocator alive for as long as the storage.
  storage_.reset(p, [allocator, bytes](void* q) noexcept { allocator->deallocate(q, bytes); });
}

Tensor Tensor::copy_to(std::shared_ptr<DeviceAllocator> allocator) const {
  TESSERA_CHECK(allocator != nullptr, "Tensor::copy_to: no allocator");
  if (!storage_) return {};
  Tensor copy(shape_, dtype_, allocator);
  // The allocator of whichever side is not the host can copy across; host to host either can.
  const auto& by = allocator->device() != Device::cpu() ? *allocator : *allocator_;
  by.copy(copy.view(), view());
  return copy;
}

Tensor Tensor::alias() const {
  Tensor other;
  other.shape_ = shape_;
  other.dtype_ = dtype_;
  other.count_ = count_;
  other.device_ = device_;
  other.allocator_ = allocator_;
  other.storage_ = storage_;
  return other;
}

Tensor Tensor::reshaped(Shape shape) && {
  if (element_count(shape) != count_) {
    throw InvalidArgument("tensor of shape " + shape_text(shape_) + " cannot be read as " +
                          shape_text(shape) + ": the element counts differ");
  }
  shape_ = std::move(shape);
  return std::move(*this);
}

void Tensor::check_host_access(DType wanted) const {
  if (device_ != Device::cpu()) {
    throw InvalidArgument("tensor lives on " + to_string(device_) +
                          ", not in host memory: copy it to the host first (Tensor::copy_to)");
  }
  if (wanted != dtype_) {
    throw InvalidArgument("tensor holds " + std::string(dtype_name(dtype_)) + ", accessed as " +
                          std::string(dtype_name(wanted)));
  }
}

}  // namespace tessera
