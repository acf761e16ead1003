#pragma once
// Shared by the ddp, gradient-sync, checkpoint and trainer tests: N ranks as threads over the
// `local` transport plugin, a communicator that only records, and small model pieces.

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "memory_store.hpp"
#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/store.hpp"
#include "tessera/plugin/transport.hpp"
#include "tessera/registry/registry.hpp"

namespace tessera::testing {

inline constexpr Duration kTestTimeout{30000};

// The plugins built beside libtessera (the build tree's plugin folder).
inline const PluginRegistry& test_registry() {
  static const auto* registry = [] {
    auto* r = new PluginRegistry();
    r->scan(PluginRegistry::default_search_path());
    return r;
  }();
  return *registry;
}

// Runs body(world) on `ranks` threads joined by the local transport; rethrows the first
// failure after every thread has ended.
inline void run_ranks(int ranks, const std::function<void(std::shared_ptr<Communicator>)>& body) {
  const auto& registry = test_registry();
  auto defaults = registry.default_options(PluginKind::transport, "local");
  auto values = defaults.values();
  values["timeout"] = "30s";
  auto transport =
      registry.create<Transport>("local", Options(defaults.section(), defaults.specs(), values));
  auto store = memory::make_memory_store();
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto world = transport->connect(store, r, ranks, kTestTimeout);
        body(world);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// A shared, ordered log of events from the code under test and from the test itself.
class EventLog {
 public:
  void add(std::string event) {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }
  [[nodiscard]] std::vector<std::string> events() const {
    std::lock_guard lock(mutex_);
    return events_;
  }
  // Index of the first event equal to `event`, or -1.
  [[nodiscard]] long index_of(const std::string& event) const {
    std::lock_guard lock(mutex_);
    for (std::size_t i = 0; i < events_.size(); ++i) {
      if (events_[i] == event) return static_cast<long>(i);
    }
    return -1;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> events_;
};

class CompletedWork final : public Work {
 public:
  bool test() override { return true; }
  void wait(Duration) override {}
  std::exception_ptr exception() override { return nullptr; }
  using Work::wait;

 protected:
  Duration default_timeout() const override { return kTestTimeout; }
};

// Pretends to be rank 0 of `size` ranks whose peers hold the same data: every collective
// leaves its buffers as they are (the average of equal values) and is logged when issued.
class RecordingCommunicator final : public Communicator {
 public:
  RecordingCommunicator(std::shared_ptr<EventLog> log, int size)
      : log_(std::move(log)), size_(size) {}
  int rank() const noexcept override { return 0; }
  int size() const noexcept override { return size_; }
  Duration timeout() const noexcept override { return kTestTimeout; }
  void abort(const std::string&) noexcept override {}
  std::vector<std::size_t> all_reduce_counts;

 protected:
  std::shared_ptr<Work> do_all_reduce(BufferView data, ReduceOp) override {
    log_->add("all_reduce " + std::to_string(all_reduce_counts.size()));
    all_reduce_counts.push_back(data.count);
    return std::make_shared<CompletedWork>();
  }
  std::shared_ptr<Work> do_reduce_scatter(BufferView, BufferView, ReduceOp) override {
    return done();
  }
  std::shared_ptr<Work> do_all_gather(BufferView, BufferView) override { return done(); }
  std::shared_ptr<Work> do_broadcast(BufferView, int) override { return done(); }
  std::shared_ptr<Work> do_send(BufferView, int, std::uint32_t) override { return done(); }
  std::shared_ptr<Work> do_recv(BufferView, int, std::uint32_t) override { return done(); }
  std::shared_ptr<Work> do_barrier() override { return done(); }
  std::unique_ptr<Communicator> do_split(int, int) override { return nullptr; }

 private:
  static std::shared_ptr<Work> done() { return std::make_shared<CompletedWork>(); }
  std::shared_ptr<EventLog> log_;
  int size_;
};

}  // namespace tessera::testing
