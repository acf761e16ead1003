#include "staged.hpp"

#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "tessera/base/error.hpp"

namespace tessera::conformance {

namespace {

// Device memory of one operation's buffer, freed with the Work that used it.
class DeviceCopy {
 public:
  DeviceCopy(std::shared_ptr<DeviceAllocator> allocator, const BufferView& host)
      : allocator_(std::move(allocator)), host_(host), bytes_(host.bytes()) {
    pointer_ = allocator_->allocate(bytes_);
    allocator_->copy(device(), host_);
  }
  ~DeviceCopy() { allocator_->deallocate(pointer_, bytes_); }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;

  [[nodiscard]] BufferView device() const {
    return {pointer_, host_.count, host_.dtype, allocator_->device()};
  }
  [[nodiscard]] const BufferView& host() const { return host_; }
  [[nodiscard]] DeviceAllocator& allocator() const { return *allocator_; }

 private:
  std::shared_ptr<DeviceAllocator> allocator_;
  BufferView host_;
  std::size_t bytes_;
  void* pointer_ = nullptr;
};

// A host buffer and where it lies on the device: its own copy, or a part of another buffer's
// when the host buffers overlap (the in-place forms), so that in place stays in place.
struct Staged {
  std::shared_ptr<DeviceCopy> owner;
  BufferView host;
  BufferView device;

  void to_host() const { owner->allocator().copy(host, device); }
};

// The device operation's Work, plus the copy back to the host once it has finished.
class StagedWork final : public Work {
 public:
  StagedWork(std::shared_ptr<Work> inner, std::vector<Staged> buffers, std::vector<Staged> results,
             Duration timeout)
      : inner_(std::move(inner)),
        buffers_(std::move(buffers)),
        results_(std::move(results)),
        timeout_(timeout) {}

  [[nodiscard]] bool test() override {
    if (!inner_->test()) return false;
    copy_back();
    return true;
  }
  void wait(Duration timeout) override {
    inner_->wait(timeout);
    copy_back();
  }
  using Work::wait;
  [[nodiscard]] std::exception_ptr exception() override { return inner_->exception(); }

 protected:
  [[nodiscard]] Duration default_timeout() const override { return timeout_; }

 private:
  void copy_back() {
    const std::lock_guard lock(mutex_);
    if (copied_ || inner_->exception()) return;
    for (const auto& result : results_) result.to_host();
    copied_ = true;
  }

  std::shared_ptr<Work> inner_;
  std::vector<Staged> buffers_;  // alive while the operation may run
  std::vector<Staged> results_;
  Duration timeout_;
  std::mutex mutex_;
  bool copied_ = false;
};

class StagedCommunicator final : public Communicator {
 public:
  StagedCommunicator(std::shared_ptr<Communicator> inner,
                     std::shared_ptr<DeviceAllocator> allocator)
      : inner_(std::move(inner)), allocator_(std::move(allocator)) {}

  [[nodiscard]] int rank() const noexcept override { return inner_->rank(); }
  [[nodiscard]] int size() const noexcept override { return inner_->size(); }
  [[nodiscard]] Duration timeout() const noexcept override { return inner_->timeout(); }
  void abort(const std::string& reason) noexcept override { inner_->abort(reason); }

 protected:
  std::shared_ptr<Work> do_all_reduce(BufferView data, ReduceOp op) override {
    const Staged d = stage(data);
    return finish(inner_->all_reduce(d.device, op), {d}, {d});
  }
  std::shared_ptr<Work> do_reduce_scatter(BufferView input, BufferView output,
                                          ReduceOp op) override {
    const Staged in = stage(input);
    const Staged out = stage(output, &in);
    return finish(inner_->reduce_scatter(in.device, out.device, op), {in, out}, {out});
  }
  std::shared_ptr<Work> do_all_gather(BufferView input, BufferView output) override {
    const Staged out = stage(output);
    const Staged in = stage(input, &out);
    return finish(inner_->all_gather(in.device, out.device), {in, out}, {out});
  }
  std::shared_ptr<Work> do_broadcast(BufferView data, int root) override {
    const Staged d = stage(data);
    return finish(inner_->broadcast(d.device, root), {d}, {d});
  }
  std::shared_ptr<Work> do_send(BufferView data, int peer, std::uint32_t tag) override {
    const Staged d = stage(data);
    return finish(inner_->send(d.device, peer, tag), {d}, {});
  }
  std::shared_ptr<Work> do_recv(BufferView data, int peer, std::uint32_t tag) override {
    const Staged d = stage(data);
    return finish(inner_->recv(d.device, peer, tag), {d}, {d});
  }
  std::shared_ptr<Work> do_barrier() override { return finish(inner_->barrier(), {}, {}); }
  std::unique_ptr<Communicator> do_split(int color, int key) override {
    auto child = inner_->split(color, key);
    if (!child) return nullptr;
    return std::make_unique<StagedCommunicator>(std::move(child), allocator_);
  }

 private:
  // `host` copied to the device; inside `within`'s host buffer, the same part of its copy.
  Staged stage(const BufferView& host, const Staged* within = nullptr) {
    if (within != nullptr && host.count > 0) {
      const auto* begin = within->host.byte_data();
      const auto* end = begin + within->host.bytes();
      if (host.byte_data() >= begin && host.byte_data() + host.bytes() <= end) {
        const auto offset = static_cast<std::size_t>(host.byte_data() - begin);
        BufferView device = host;
        device.data = within->device.byte_data() + offset;
        device.device = within->device.device;
        return {within->owner, host, device};
      }
    }
    auto copy = std::make_shared<DeviceCopy>(allocator_, host);
    return {copy, host, copy->device()};
  }
  std::shared_ptr<Work> finish(std::shared_ptr<Work> work, std::vector<Staged> buffers,
                               std::vector<Staged> results) {
    return std::make_shared<StagedWork>(std::move(work), std::move(buffers), std::move(results),
                                        inner_->timeout());
  }

  std::shared_ptr<Communicator> inner_;
  std::shared_ptr<DeviceAllocator> allocator_;
};

}  // namespace

std::shared_ptr<Communicator> staged_on_device(std::shared_ptr<Communicator> inner,
                                               std::shared_ptr<DeviceAllocator> allocator) {
  return std::make_shared<StagedCommunicator>(std::move(inner), std::move(allocator));
}

}  // namespace tessera::conformance
