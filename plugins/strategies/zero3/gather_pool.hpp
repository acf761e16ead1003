#pragma once
// GatherPool: the reusable buffers that hold whole (gathered) units — parameters gathered for
// a forward or backward, and full gradients on their way into a reduce-scatter.

#include <cstddef>
#include <memory>
#include <vector>

#include "tessera/base/tensor.hpp"
#include "tessera/plugin/work.hpp"

namespace tessera::zero3 {

// Every buffer has the size of the largest gathered unit, so any buffer serves any unit and
// the pool stops growing after the first step.
//
// A buffer is either held (someone computes on it or waits for the collective filling it)
// or free. A free buffer may still be read or written by a collective in flight (`last_use`).
// Communicator operations run one after another in issue order, so such a buffer may be given
// at once to a collective issued later on the same communicator (it starts only after the
// earlier one has finished with the buffer); code that touches it itself must first wait.
// That hand-off keeps the backward pass at three buffers: the unit's parameters, its
// gradient, and one buffer that carries the previous unit's reduce-scatter and then the next
// unit's prefetched gather.
//
// Thread-safety: none; one strategy drives one pool.
class GatherPool {
 public:
  // Buffers come from `allocator` (the strategy's).
  GatherPool(std::size_t buffer_elements, std::shared_ptr<DeviceAllocator> allocator)
      : elements_(buffer_elements), allocator_(std::move(allocator)) {}

  // A buffer for the output of a collective about to be issued: preferably one whose last use
  // is still in flight, else an idle one, else a new one. Held until release().
  std::size_t acquire_for_collective();
  // A buffer the caller writes itself: an idle one, else a free one after waiting for its
  // last collective (Timeout and TransportError propagate), else a new one.
  std::size_t acquire_for_compute(Duration timeout);
  // Returns a held buffer; `last_use` is the collective still reading or writing it, if any.
  void release(std::size_t buffer, std::shared_ptr<Work> last_use = nullptr);

  [[nodiscard]] float* data(std::size_t buffer) const {
    return static_cast<float*>(slots_.at(buffer).storage.view().data);  // host or device
  }
  [[nodiscard]] std::size_t buffer_elements() const noexcept { return elements_; }
  [[nodiscard]] std::size_t buffer_count() const noexcept { return slots_.size(); }
  [[nodiscard]] std::size_t bytes() const noexcept {
    return slots_.size() * elements_ * sizeof(float);
  }
  // Waits for every free buffer's last collective; errors are left to the owners of those
  // Works, which wait on them themselves. Call before the buffers may die.
  void quiesce(Duration timeout) noexcept;

 private:
  struct Slot {
    Tensor storage;
    bool held = false;
    std::shared_ptr<Work> last_use;
  };
  std::size_t add_slot();

  std::size_t elements_;
  std::shared_ptr<DeviceAllocator> allocator_;
  std::vector<Slot> slots_;
};

}  // namespace tessera::zero3
