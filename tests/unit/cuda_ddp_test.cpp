// The ddp strategy with its parameters, gradients and optimizer state on a GPU, over the nccl
// transport (one rank, one GPU), against the same run on the host: the model computes with
// cuBLAS and CUDA kernels there, so the parameters follow the host's to float tolerance, and
// two GPU runs give the same bits. Skips, saying why, where no GPU is visible.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <string>

#include "ddp_strategy.hpp"
#include "ddp_test_support.hpp"
#include "sgd/sgd.hpp"
#include "tessera/base/error.hpp"
#include "tessera/plugin/device_memory_source.hpp"
#include "tessera/strategy_kit/memory_state.hpp"
#include "trainer_test_support.hpp"

namespace tessera {
namespace {

struct Gpu {
  std::shared_ptr<Communicator> world;
  std::shared_ptr<DeviceAllocator> memory;
};

// The nccl transport's world of one on cuda:0, or why there is none.
std::optional<Gpu> one_gpu(std::string& why) {
  const auto& registry = testing::test_registry();
  if (registry.try_find(PluginKind::transport, "nccl") == nullptr) {
    why = "the nccl transport is not built";
    return std::nullopt;
  }
  auto transport =
      registry.create<Transport>("nccl", registry.default_options(PluginKind::transport, "nccl"));
  try {
    Gpu gpu;
    gpu.memory = memory_for(*transport, Device::cuda(0));
    gpu.world = transport->connect(make_memory_store(), 0, 1, testing::kTestTimeout);
    return gpu;
  } catch (const Error& e) {
    why = e.what();
    return std::nullopt;
  }
}

struct Trained {
  std::vector<std::vector<float>> params;  // after every step
  std::vector<double> losses;
  std::vector<double> norms;
};

// 20 steps of batch 16 with momentum SGD, clipped at `max_grad_norm` (0: not clipped).
Trained train(const std::shared_ptr<Communicator>& world, std::shared_ptr<DeviceAllocator> memory,
              double max_grad_norm, ddp::DdpStrategy* keep = nullptr) {
  const auto model = testing::small_mlp();
  const auto data = testing::small_synthetic_data(512);
  ddp::DdpStrategy local(ddp::DdpConfig{});
  ddp::DdpStrategy& strategy = keep != nullptr ? *keep : local;
  StrategySetup setup{world, model, std::make_shared<sgd::SgdOptimizer>(sgd::SgdConfig{0.9F}), 7,
                      max_grad_norm};
  setup.allocator = std::move(memory);
  strategy.setup(setup);
  Trained out;
  for (int s = 0; s < 20; ++s) {
    std::vector<std::size_t> indices(16);
    std::iota(indices.begin(), indices.end(), static_cast<std::size_t>(s) * 16);
    const auto stats =
        strategy.train_step(data->gather(Split::train, indices), StepInfo{s + 1, 0.05F, 16});
    out.params.push_back(strategy.host_parameters());
    out.losses.push_back(stats.loss);
    out.norms.push_back(stats.grad_norm);
  }
  return out;
}

Trained train_on_host(double max_grad_norm) {
  Trained out;
  testing::run_ranks(
      1, [&](std::shared_ptr<Communicator> world) { out = train(world, nullptr, max_grad_norm); });
  return out;
}

// |a - b| over the larger magnitude, worst element.
double relative_gap(const std::vector<float>& a, const std::vector<float>& b) {
  double gap = 0.0;
  double scale = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    gap = std::max(gap, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return gap / scale;
}

class CudaDdp : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    gpu_ = one_gpu(why);
    if (!gpu_) GTEST_SKIP() << why;
  }
  std::optional<Gpu> gpu_;
};

// The GEMMs sum in cuBLAS's order, not OpenBLAS's: each step differs from the host's by float
// rounding (about 1e-7 relative), and 20 steps of momentum SGD keep that below 1e-4.
TEST_F(CudaDdp, TrainsLikeTheHostWithAndWithoutClipping) {
  for (const double clip : {0.0, 0.5}) {
    const Trained host = train_on_host(clip);
    const Trained gpu = train(gpu_->world, gpu_->memory, clip);
    for (std::size_t s = 0; s < host.params.size(); ++s) {
      ASSERT_LT(relative_gap(gpu.params[s], host.params[s]), 1e-4) << "step " << s + 1;
      ASSERT_NEAR(gpu.losses[s], host.losses[s], 1e-4 * (1.0 + std::fabs(host.losses[s])));
      ASSERT_NEAR(gpu.norms[s], host.norms[s], 1e-4 * (1.0 + host.norms[s]));
    }
    EXPECT_NE(gpu.params.front(), gpu.params.back()) << "it trained";
  }
}

TEST_F(CudaDdp, TwoGpuRunsGiveTheSameBits) {
  const Trained first = train(gpu_->world, gpu_->memory, 0.5);
  const Trained second = train(gpu_->world, gpu_->memory, 0.5);
  EXPECT_EQ(first.params, second.params);
  EXPECT_EQ(first.losses, second.losses);
}

// A checkpoint of device state goes through the host and back bit for bit, and a host run can
// read it: the format does not know where the state lived.
TEST_F(CudaDdp, ACheckpointOfDeviceStateLoadsOnTheDeviceAndOnTheHost) {
  ddp::DdpStrategy trained(ddp::DdpConfig{});
  (void)train(gpu_->world, gpu_->memory, 0.0, &trained);
  MemoryCheckpoint saved(1);
  trained.save(saved);

  ddp::DdpStrategy again(ddp::DdpConfig{});
  StrategySetup setup{gpu_->world, testing::small_mlp(),
                      std::make_shared<sgd::SgdOptimizer>(sgd::SgdConfig{0.9F}), 99};
  setup.allocator = gpu_->memory;
  again.setup(setup);
  again.load(saved);
  EXPECT_EQ(again.host_parameters(), trained.host_parameters());

  testing::run_ranks(1, [&](std::shared_ptr<Communicator> world) {
    ddp::DdpStrategy host(ddp::DdpConfig{});
    host.setup({world, testing::small_mlp(),
                std::make_shared<sgd::SgdOptimizer>(sgd::SgdConfig{0.9F}), 5});
    host.load(saved);
    EXPECT_EQ(host.host_parameters(), trained.host_parameters());
  });
}

}  // namespace
}  // namespace tessera
