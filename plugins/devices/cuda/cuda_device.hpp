#pragma once
// Which CUDA devices this process sees, and the one a rank runs on.

#include <string>

#include "tessera/base/dtype.hpp"

namespace tessera::cuda {

// Devices the CUDA runtime reports, 0 where there is no driver or no GPU (never throws).
[[nodiscard]] int device_count() noexcept;

// Throws Error when `device` is not a CUDA device this process can use: no driver, no GPU, or
// an ordinal past the last one. The message starts with "`who` needs a CUDA device" (tests that
// must skip without a GPU look for those words), then says why it has none and what to do.
void require(Device device, const std::string& who);

// Makes `ordinal` the calling thread's current device for its lifetime, then restores the one
// before. Throws like check().
class DeviceGuard {
 public:
  explicit DeviceGuard(int ordinal);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool changed_ = false;
};

}  // namespace tessera::cuda
