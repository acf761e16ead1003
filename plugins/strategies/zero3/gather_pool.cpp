#include "gather_pool.hpp"

#include "tessera/base/error.hpp"

namespace tessera::zero3 {

std::size_t GatherPool::add_slot() {
  Slot slot;
  slot.storage = Tensor({elements_}, DType::f32, allocator_);
  slot.held = true;
  slots_.push_back(std::move(slot));
  return slots_.size() - 1;
}

std::size_t GatherPool::acquire_for_collective() {
  std::size_t idle = slots_.size();
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    auto& slot = slots_[i];
    if (slot.held) continue;
    if (slot.last_use && !slot.last_use->test()) {
      slot.held = true;
      return i;
    }
    if (idle == slots_.size()) idle = i;
  }
  if (idle == slots_.size()) return add_slot();
  slots_[idle].held = true;
  slots_[idle].last_use.reset();
  return idle;
}

std::size_t GatherPool::acquire_for_compute(Duration timeout) {
  std::size_t busy = slots_.size();
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    auto& slot = slots_[i];
    if (slot.held) continue;
    if (!slot.last_use || slot.last_use->test()) {
      slot.held = true;
      slot.last_use.reset();
      return i;
    }
    if (busy == slots_.size()) busy = i;
  }
  if (busy == slots_.size()) return add_slot();
  // Waiting for a collective that is almost always done by now costs less than a new buffer.
  auto& slot = slots_[busy];
  slot.last_use->wait(timeout);
  slot.held = true;
  slot.last_use.reset();
  return busy;
}

void GatherPool::release(std::size_t buffer, std::shared_ptr<Work> last_use) {
  auto& slot = slots_.at(buffer);
  TESSERA_CHECK(slot.held, "GatherPool: buffer " + std::to_string(buffer) + " released twice");
  slot.held = false;
  slot.last_use = std::move(last_use);
}

void GatherPool::quiesce(Duration timeout) noexcept {
  for (auto& slot : slots_) {
    if (!slot.last_use) continue;
    try {
      slot.last_use->wait(timeout);
    } catch (...) {  // NOLINT(bugprone-empty-catch): reported through the Work's owner
    }
    slot.last_use.reset();
  }
}

}  // namespace tessera::zero3
