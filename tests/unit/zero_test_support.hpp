#pragma once
// Shared by the zero tests: the small MLP, data and optimizer they train, and an in-memory
// checkpoint (named blobs) to tamper with.

#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "adam/adam.hpp"
#include "mlp/mlp_model.hpp"
#include "synthetic/synthetic.hpp"
#include "tessera/base/error.hpp"
#include "tessera/plugin/strategy.hpp"

namespace tessera::testing {

// 26 122 parameters: several 4096-element blocks and buckets at every world size, with
// bucket and layer edges that do not line up, so staging windows carry partial buckets.
inline std::shared_ptr<const Model> zero_test_mlp() {
  mlp::MlpConfig config;
  config.sizes = {64, 128, 128, 10};
  return std::make_shared<mlp::MlpModel>(config);
}

inline std::shared_ptr<const Dataset> zero_test_data() {
  synthetic::SyntheticConfig config;
  config.samples = 2048;
  config.test_samples = 64;
  config.features = 64;
  config.classes = 10;
  return std::make_shared<synthetic::SyntheticDataset>(config);
}

inline std::shared_ptr<const Optimizer> zero_test_adam() {
  return std::make_shared<adam::AdamOptimizer>(adam::AdamConfig{});
}

inline std::vector<std::size_t> consecutive(std::size_t begin, std::size_t n) {
  std::vector<std::size_t> v(n);
  std::iota(v.begin(), v.end(), begin);
  return v;
}

// Blobs in memory; every rank writes into the same one (thread-safe puts).
class MemoryCheckpoint final : public CheckpointWriter, public CheckpointReader {
 public:
  explicit MemoryCheckpoint(int world) : world_(world) {}
  void put(const std::string& name, std::span<const std::byte> bytes) override {
    std::lock_guard lock(mutex_);
    blobs_[name].assign(bytes.begin(), bytes.end());
  }
  [[nodiscard]] std::vector<std::byte> get(const std::string& name) const override {
    std::lock_guard lock(mutex_);
    const auto it = blobs_.find(name);
    if (it == blobs_.end()) throw CheckpointError("no blob " + name);
    return it->second;
  }
  [[nodiscard]] bool contains(const std::string& name) const override {
    std::lock_guard lock(mutex_);
    return blobs_.count(name) != 0;
  }
  [[nodiscard]] int saved_world_size() const override { return world_; }
  void set_text(const std::string& name, const std::string& text) {
    put(name, std::as_bytes(std::span<const char>(text.data(), text.size())));
  }
  [[nodiscard]] std::string text(const std::string& name) const {
    const auto bytes = get(name);
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
  }
  void erase(const std::string& name) {
    std::lock_guard lock(mutex_);
    blobs_.erase(name);
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::vector<std::byte>> blobs_;
  int world_;
};

}  // namespace tessera::testing
