#pragma once
// Helpers the layer and model tests share: random tensors and a finite-difference gradient check.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "tessera/base/error.hpp"
#include "tessera/base/random.hpp"
#include "tessera/base/tensor.hpp"

namespace tessera::testing {

inline Tensor random_tensor(Shape shape, std::uint64_t seed, float scale = 1.0F) {
  Tensor t(std::move(shape), DType::f32);
  auto v = t.as<float>();
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = (2.0F * counter_uniform(seed, 7, i) - 1.0F) * scale;
  return t;
}

inline Tensor copy_of(const Tensor& t) {
  Tensor out(t.shape(), t.dtype());
  std::copy_n(static_cast<const std::byte*>(t.view().data), t.bytes(),
              static_cast<std::byte*>(out.view().data));
  return out;
}

// (f(v + step) - f(v - step)) / (2 step) for v = values[i], perturbed in place and restored.
template <class Real>
double central_difference(std::span<Real> values, std::size_t i, const std::function<double()>& f,
                          Real step) {
  const Real saved = values[i];
  values[i] = saved + step;
  const double up = f();
  values[i] = saved - step;
  const double down = f();
  values[i] = saved;
  return (up - down) / (2.0 * static_cast<double>(step));
}

// Central differences of the scalar function f with respect to every element of `values`,
// compared with `analytic`.
inline void expect_gradient_matches(std::span<float> values, std::span<const float> analytic,
                                    const std::function<double()>& f, float step = 1e-2F,
                                    double tolerance = 2e-2) {
  ASSERT_EQ(values.size(), analytic.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double numeric = central_difference(values, i, f, step);
    EXPECT_NEAR(analytic[i], numeric, tolerance * std::max(1.0, std::abs(numeric)))
        << "element " << i;
  }
}

// Host memory that says it is on cuda:`ordinal`, an ordinal past the visible devices: the layers
// must refuse it before reading a byte. Needs no GPU, so the tests with it run everywhere.
class UnseenDevice final : public DeviceAllocator {
 public:
  explicit UnseenDevice(int ordinal) : ordinal_(ordinal) {}
  [[nodiscard]] Device device() const noexcept override { return Device::cuda(ordinal_); }
  [[nodiscard]] void* allocate(std::size_t bytes) override {
    return cpu_allocator()->allocate(bytes);
  }
  void deallocate(void* pointer, std::size_t bytes) noexcept override {
    cpu_allocator()->deallocate(pointer, bytes);
  }
  void copy(BufferView dst, BufferView src) const override {
    std::memcpy(dst.data, src.data, src.bytes());
  }

 private:
  int ordinal_;
};

}  // namespace tessera::testing
