#pragma once
// What the tests of the layers on a CUDA device share: copies between the host and cuda:0,
// element-wise comparisons that copy the GPU's side back first, and the fixture that skips
// without a visible GPU.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "cuda/cuda_allocator.hpp"
#include "cuda/cuda_device.hpp"
#include "layer_test_support.hpp"
#include "tessera/base/tensor.hpp"

namespace tessera::testing {

inline Tensor on_gpu(const Tensor& host) {
  return host.copy_to(tessera::cuda::allocator_for(0));
}

inline Tensor on_host(const Tensor& tensor) {
  return tensor.copy_to(cpu_allocator());
}

inline Tensor absolute(const Tensor& host) {
  Tensor out = copy_of(host);
  for (float& v : out.as<float>()) v = std::abs(v);
  return out;
}

// |gpu - host| <= relative * scale elementwise; `gpu` is copied back first.
inline void expect_close(const Tensor& gpu, const Tensor& host, const Tensor& scale,
                         double relative, const std::string& what) {
  ASSERT_EQ(gpu.device(), Device::cuda(0)) << what;
  ASSERT_EQ(gpu.shape(), host.shape()) << what;
  const Tensor back = on_host(gpu);
  const auto g = back.as<float>();
  const auto h = host.as<float>();
  const auto s = scale.as<float>();
  for (std::size_t i = 0; i < h.size(); ++i) {
    ASSERT_LE(std::abs(double{g[i]} - double{h[i]}), relative * double{s[i]})
        << what << ", element " << i << ": gpu " << g[i] << ", host " << h[i];
  }
}

// The same bytes, wherever each tensor lies.
inline void expect_bitwise(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.bytes(), b.bytes()) << what;
  const Tensor ha = a.device() == Device::cpu() ? copy_of(a) : on_host(a);
  const Tensor hb = b.device() == Device::cpu() ? copy_of(b) : on_host(b);
  EXPECT_EQ(std::memcmp(ha.view().data, hb.view().data, ha.bytes()), 0) << what;
}

// Skips every test of the suite where no CUDA device is visible (CI has none).
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (tessera::cuda::device_count() == 0) {
      GTEST_SKIP() << "no CUDA device is visible; the layers' device path is checked on a "
                      "machine with an NVIDIA GPU";
    }
  }
};

}  // namespace tessera::testing
