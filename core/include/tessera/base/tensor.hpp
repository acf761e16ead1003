#pragma once
// An owning, contiguous, CPU tensor: shape plus storage. Small on purpose; the framework moves
// flat spans around and only layers care about shapes.

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

#include "tessera/base/buffer_view.hpp"

namespace tessera {

using Shape = std::vector<std::size_t>;

[[nodiscard]] std::size_t element_count(const Shape& shape) noexcept;

class Tensor {
 public:
  Tensor() = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  ~Tensor() = default;
  // Zero-initialised storage of element_count(shape) elements, 64-byte aligned.
  Tensor(Shape shape, DType dtype);

  [[nodiscard]] const Shape& shape() const noexcept { return shape_; }
  [[nodiscard]] DType dtype() const noexcept { return dtype_; }
  [[nodiscard]] std::size_t count() const noexcept { return count_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return count_ * dtype_size(dtype_); }
  [[nodiscard]] BufferView view() const noexcept {
    return {storage_.get(), count_, dtype_, Device::cpu()};
  }

  // A second handle to the same storage (no copy): how a layer keeps its input or output for
  // backward. Writes through either handle are seen by both; the memory lives until the last
  // handle dies.
  [[nodiscard]] Tensor alias() const;

  // Typed access; throws InvalidArgument if T does not match dtype().
  template <class T>
  [[nodiscard]] std::span<T> as() const {
    check_dtype(dtype_of<T>::value);
    return {static_cast<T*>(storage_.get()), count_};
  }

 private:
  struct FreeAligned {
    void operator()(void* p) const noexcept;
  };
  void check_dtype(DType wanted) const;

  Shape shape_;
  DType dtype_ = DType::f32;
  std::size_t count_ = 0;
  // Shared only through alias(); Tensor itself stays move-only so copies are always explicit.
  std::shared_ptr<void> storage_;
};

}  // namespace tessera
