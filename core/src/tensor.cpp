#include "tessera/base/tensor.hpp"

#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <numeric>

#include "tessera/base/error.hpp"

namespace tessera {

std::size_t element_count(const Shape& shape) noexcept {
  return std::accumulate(shape.begin(), shape.end(), std::size_t{1}, std::multiplies<>());
}

void Tensor::FreeAligned::operator()(void* p) const noexcept {
  std::free(p);
}

Tensor::Tensor(Shape shape, DType dtype)
    : shape_(std::move(shape)), dtype_(dtype), count_(element_count(shape_)) {
  constexpr std::size_t kAlignment = 64;  // a cache line: SIMD loads never straddle two
  const std::size_t bytes = count_ * dtype_size(dtype_);
  const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, rounded == 0 ? kAlignment : rounded);
  storage_.reset(p, FreeAligned{});
}

Tensor Tensor::alias() const {
  Tensor other;
  other.shape_ = shape_;
  other.dtype_ = dtype_;
  other.count_ = count_;
  other.storage_ = storage_;
  return other;
}

void Tensor::check_dtype(DType wanted) const {
  if (wanted != dtype_) {
    throw InvalidArgument("tensor holds " + std::string(dtype_name(dtype_)) + ", accessed as " +
                          std::string(dtype_name(wanted)));
  }
}

}  // namespace tessera
