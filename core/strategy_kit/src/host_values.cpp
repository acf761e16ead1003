#include "tessera/strategy_kit/host_values.hpp"

#include <string>

#include "tessera/base/error.hpp"

namespace tessera {

namespace {

// A host view's copy in the memory `world` moves, copied back on demand, freed at scope end.
class Travelling {
 public:
  Travelling(Communicator& world, DeviceAllocator* memory, BufferView host)
      : host_(host), there_(host) {
    if (world.moves(Device::cpu())) return;
    if (memory == nullptr || !world.moves(memory->device())) {
      throw InvalidArgument(
          "host values through a communicator that moves no host memory need the allocator of a "
          "device it moves; got " +
          (memory == nullptr ? std::string("none") : to_string(memory->device())));
    }
    memory_ = memory;
    there_.data = memory_->allocate(host.bytes());
    there_.device = memory_->device();
    memory_->copy(there_, host_);
  }
  ~Travelling() {
    if (memory_ != nullptr) memory_->deallocate(there_.data, host_.bytes());
  }
  Travelling(const Travelling&) = delete;
  Travelling& operator=(const Travelling&) = delete;

  [[nodiscard]] BufferView there() const { return there_; }
  void back() {
    if (memory_ != nullptr) memory_->copy(host_, there_);
  }

 private:
  BufferView host_;
  BufferView there_;
  DeviceAllocator* memory_ = nullptr;
};

}  // namespace

void all_reduce_host(Communicator& world, DeviceAllocator* memory, BufferView values, ReduceOp op) {
  Travelling v(world, memory, values);
  world.all_reduce(v.there(), op)->wait();
  v.back();
}

void broadcast_host(Communicator& world, DeviceAllocator* memory, BufferView values, int root) {
  Travelling v(world, memory, values);
  world.broadcast(v.there(), root)->wait();
  v.back();
}

void all_gather_host(Communicator& world, DeviceAllocator* memory, BufferView values,
                     BufferView out) {
  Travelling in(world, memory, values);
  Travelling all(world, memory, out);
  world.all_gather(in.there(), all.there())->wait();
  all.back();
}

}  // namespace tessera
