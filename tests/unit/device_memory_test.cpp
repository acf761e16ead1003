// Device-aware memory: tensors know their device, host access to device memory is refused,
// copies go through the allocator of the device side, and storage returns to its allocator.
// No GPU here: FakeDevice hands out host memory but says it is cuda:0, which is exactly what
// the core must not touch directly.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include "tessera/base/device_allocator.hpp"
#include "tessera/base/error.hpp"
#include "tessera/base/tensor.hpp"

namespace tessera {
namespace {

class FakeDevice final : public DeviceAllocator {
 public:
  [[nodiscard]] Device device() const noexcept override { return Device::cuda(0); }
  [[nodiscard]] void* allocate(std::size_t bytes) override {
    ++allocations;
    void* p = cpu_allocator()->allocate(bytes);
    last_bytes = bytes;
    return p;
  }
  void deallocate(void* pointer, std::size_t bytes) noexcept override {
    ++deallocations;
    freed_bytes = bytes;
    cpu_allocator()->deallocate(pointer, bytes);
  }
  void copy(BufferView dst, BufferView src) const override {
    ++copies;
    ASSERT_EQ(dst.bytes(), src.bytes());
    std::memcpy(dst.data, src.data, src.bytes());
  }

  mutable std::atomic<int> copies = 0;
  std::atomic<int> allocations = 0;
  std::atomic<int> deallocations = 0;
  std::size_t last_bytes = 0;
  std::size_t freed_bytes = 0;
};

TEST(DeviceMemory, ATensorOnADeviceSaysSoAndRefusesHostAccess) {
  auto device = std::make_shared<FakeDevice>();
  Tensor t({4, 3}, DType::f32, device);
  EXPECT_EQ(t.device(), Device::cuda(0));
  EXPECT_EQ(t.view().device, Device::cuda(0));
  EXPECT_EQ(t.alias().view().device, Device::cuda(0));
  try {
    (void)t.as<float>();
    FAIL() << "host access to device memory was allowed";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("copy_to"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)t.view().host_span<float>("weights"), InvalidArgument);
}

TEST(DeviceMemory, HostTensorsStayOnTheHostByDefault) {
  Tensor t({2}, DType::f64);
  EXPECT_EQ(t.device(), Device::cpu());
  EXPECT_EQ(t.view().host_span<double>("values").size(), 2U);
  EXPECT_THROW((void)t.view().host_span<float>("values"), InvalidArgument);  // wrong dtype
}

TEST(DeviceMemory, CopiesToTheDeviceAndBackGoThroughTheDevicesAllocator) {
  auto device = std::make_shared<FakeDevice>();
  Tensor host({5}, DType::f32);
  for (std::size_t i = 0; i < 5; ++i) host.as<float>()[i] = static_cast<float>(i) + 0.5F;

  const Tensor on_device = host.copy_to(device);
  EXPECT_EQ(on_device.device(), Device::cuda(0));
  EXPECT_EQ(on_device.shape(), host.shape());
  EXPECT_EQ(device->copies, 1);

  const Tensor back = on_device.copy_to(cpu_allocator());
  EXPECT_EQ(back.device(), Device::cpu());
  EXPECT_EQ(device->copies, 2);  // device to host is the device's copy too, not the host's
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(back.as<float>()[i], host.as<float>()[i]);
}

TEST(DeviceMemory, StorageGoesBackToItsAllocatorWhenTheLastAliasDies) {
  auto device = std::make_shared<FakeDevice>();
  {
    Tensor t({3, 7}, DType::bf16, device);
    EXPECT_EQ(device->last_bytes, 42U);
    Tensor alias = t.alias();
    { Tensor moved = std::move(t); }
    EXPECT_EQ(device->deallocations, 0);  // `alias` still holds it
  }
  EXPECT_EQ(device->allocations, 1);
  EXPECT_EQ(device->deallocations, 1);
  EXPECT_EQ(device->freed_bytes, 42U);
}

TEST(DeviceMemory, TheHostAllocatorAlignsZeroesAndRefusesDeviceCopies) {
  auto host = cpu_allocator();
  void* p = host->allocate(100);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % kDeviceAlignment, 0U);
  for (std::size_t i = 0; i < 100; ++i) EXPECT_EQ(static_cast<unsigned char*>(p)[i], 0);
  float x = 1.0F;
  const BufferView on_device{&x, 1, DType::f32, Device::cuda(0)};
  EXPECT_THROW(host->copy(on_device, {p, 1, DType::f32, Device::cpu()}), InvalidArgument);
  host->deallocate(p, 100);
}

TEST(DeviceMemory, AnImpossibleAllocationIsOutOfMemoryNamingTheDeviceAndSize) {
  const std::size_t huge = std::numeric_limits<std::size_t>::max() / 2;
  try {
    Tensor t({huge}, DType::u8);
    FAIL() << "allocated " << huge << " bytes";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("on cpu"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(huge)), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
