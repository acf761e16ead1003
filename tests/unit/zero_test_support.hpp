#pragma once
// Shared by the zero tests: the small MLP, data and optimizer they train, and an in-memory
// checkpoint (checkpoint_test_support.hpp) to tamper with.

#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "adam/adam.hpp"
#include "checkpoint_test_support.hpp"
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

}  // namespace tessera::testing
