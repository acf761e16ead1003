// The optimizers on a CUDA device: several steps on the GPU write the very bits the host loop
// writes (the kernels repeat its operations in its order, without fused multiply-adds, and
// CUDA's sqrtf and division round like the host's), step() has finished when it returns, and
// views on mixed devices or over memory that is not the device's are refused before any memory
// is touched. Without a visible GPU every test that computes skips (CI has none).

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "adam/adam.hpp"
#include "cuda/cuda_allocator.hpp"
#include "cuda/cuda_device.hpp"
#include "rmsprop/rmsprop.hpp"
#include "sgd/sgd.hpp"
#include "tessera/base/error.hpp"
#include "tessera/base/random.hpp"
#include "tessera/base/tensor.hpp"

namespace tessera {
namespace {

constexpr int kSteps = 5;
constexpr float kLr = 0.1F;

std::vector<float> values(std::size_t n, std::uint64_t seed, float scale) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = (2.0F * counter_uniform(seed, 3, i) - 1.0F) * scale;
  return v;
}

Tensor gpu_copy(const std::vector<float>& host) {
  Tensor on_host({host.size()}, DType::f32);
  std::copy(host.begin(), host.end(), on_host.as<float>().begin());
  return on_host.copy_to(tessera::cuda::allocator_for(0));
}

std::vector<float> host_copy(const Tensor& tensor) {
  const Tensor back = tensor.copy_to(cpu_allocator());
  const auto v = back.as<float>();
  return {v.begin(), v.end()};
}

struct Named {
  std::string name;
  std::shared_ptr<const Optimizer> optimizer;
};

// Every formula branch of every optimizer: momentum, dampening, Nesterov, L2 and decoupled decay,
// centered RMSprop with momentum.
std::vector<Named> every_optimizer() {
  return {
      {"sgd", std::make_shared<sgd::SgdOptimizer>(sgd::SgdConfig{})},
      {"sgd_decay", std::make_shared<sgd::SgdOptimizer>(sgd::SgdConfig{0.0F, 0.0F, 0.01F, false})},
      {"sgd_momentum_dampening",
       std::make_shared<sgd::SgdOptimizer>(sgd::SgdConfig{0.9F, 0.1F, 0.01F, false})},
      {"sgd_nesterov",
       std::make_shared<sgd::SgdOptimizer>(sgd::SgdConfig{0.9F, 0.0F, 0.01F, true})},
      {"adam",
       std::make_shared<adam::AdamOptimizer>(adam::AdamConfig{0.9F, 0.999F, 1e-8F, 0.01F, false})},
      {"adamw",
       std::make_shared<adam::AdamOptimizer>(adam::AdamConfig{0.9F, 0.999F, 1e-8F, 0.01F, true})},
      {"rmsprop", std::make_shared<rmsprop::RmspropOptimizer>(rmsprop::RmspropConfig{})},
      {"rmsprop_centered_momentum", std::make_shared<rmsprop::RmspropOptimizer>(
                                        rmsprop::RmspropConfig{0.9F, 1e-8F, 0.01F, 0.9F, true})},
  };
}

struct Result {
  std::vector<float> params;
  std::vector<float> state;
};

// `exempt`: the elements weight decay skips (StepInfo::no_weight_decay).
StepInfo step_info(int t, std::span<const ElementRange> exempt) {
  StepInfo info{t, kLr};
  info.no_weight_decay = exempt;
  return info;
}

Result run_on_host(const Optimizer& optimizer, std::size_t n,
                   std::span<const ElementRange> exempt = {}) {
  Result r{values(n, 1, 2.0F), std::vector<float>(optimizer.state_per_param() * n, 0.0F)};
  for (int t = 1; t <= kSteps; ++t) {
    const std::vector<float> g = values(n, 100 + static_cast<std::uint64_t>(t), 1.0F);
    optimizer.step(r.params, g, r.state, step_info(t, exempt));
  }
  return r;
}

// After every step the parameters are read back through a blocking copy on the default stream:
// also the check that step() left nothing in flight that the next step's inputs could race.
Result run_on_gpu(const Optimizer& optimizer, std::size_t n,
                  std::span<const ElementRange> exempt = {}) {
  Tensor params = gpu_copy(values(n, 1, 2.0F));
  Tensor state = gpu_copy(std::vector<float>(optimizer.state_per_param() * n, 0.0F));
  for (int t = 1; t <= kSteps; ++t) {
    const Tensor g = gpu_copy(values(n, 100 + static_cast<std::uint64_t>(t), 1.0F));
    optimizer.step(params.view(), g.view(), state.view(), step_info(t, exempt));
  }
  return {host_copy(params), host_copy(state)};
}

void expect_bitwise(const std::vector<float>& a, const std::vector<float>& b,
                    const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      ADD_FAILURE() << what << ", element " << i << ": " << a[i] << " vs " << b[i];
      return;
    }
  }
}

class CudaOptimizers : public ::testing::Test {
 protected:
  void SetUp() override {
    if (tessera::cuda::device_count() == 0) {
      GTEST_SKIP() << "no CUDA device is visible; the optimizers' device path is checked on a "
                      "machine with an NVIDIA GPU";
    }
  }
};

TEST_F(CudaOptimizers, RunOnEveryVisibleDeviceAndNoOther) {
  for (const auto& [name, optimizer] : every_optimizer()) {
    EXPECT_TRUE(optimizer->runs_on(Device::cpu())) << name;
    EXPECT_TRUE(optimizer->runs_on(Device::cuda(0))) << name;
    EXPECT_FALSE(optimizer->runs_on(Device::cuda(tessera::cuda::device_count()))) << name;
    EXPECT_FALSE(optimizer->runs_on(Device::cuda(-1))) << name;
  }
}

TEST_F(CudaOptimizers, StepsOnTheGpuWriteTheHostsBits) {
  for (const auto& [name, optimizer] : every_optimizer()) {
    const Result host = run_on_host(*optimizer, 1000);
    const Result gpu = run_on_gpu(*optimizer, 1000);
    expect_bitwise(gpu.params, host.params, name + " parameters");
    expect_bitwise(gpu.state, host.state, name + " state");
  }
}

// Each exempt range is its own launch over a part of the buffers whose state slots stay the
// whole step's stride apart (DeviceStep::slot_stride): the host's bits all the same.
TEST_F(CudaOptimizers, WeightDecayExemptionsOnTheGpuWriteTheHostsBits) {
  const std::vector<ElementRange> exempt = {{0, 3}, {100, 517}, {518, 519}, {900, 1000}};
  for (const auto& [name, optimizer] : every_optimizer()) {
    const Result host = run_on_host(*optimizer, 1000, exempt);
    const Result gpu = run_on_gpu(*optimizer, 1000, exempt);
    expect_bitwise(gpu.params, host.params, name + " parameters");
    expect_bitwise(gpu.state, host.state, name + " state");
  }
}

TEST_F(CudaOptimizers, BuffersLargerThanOneGridPassAreUpdatedEverywhere) {
  // More elements than the kernels' 65535 blocks of 256 threads cover at once.
  const std::size_t n = std::size_t{65535} * 256 + 1001;
  const adam::AdamOptimizer adam(adam::AdamConfig{});
  const Result host = run_on_host(adam, n);
  const Result gpu = run_on_gpu(adam, n);
  expect_bitwise(gpu.params, host.params, "adam parameters");
  expect_bitwise(gpu.state, host.state, "adam state");
}

TEST_F(CudaOptimizers, TwoGpuRunsGiveTheSameBits) {
  for (const auto& [name, optimizer] : every_optimizer()) {
    const Result first = run_on_gpu(*optimizer, 4097);
    const Result second = run_on_gpu(*optimizer, 4097);
    expect_bitwise(first.params, second.params, name + " parameters");
    expect_bitwise(first.state, second.state, name + " state");
  }
}

TEST_F(CudaOptimizers, AnEmptyStateViewMaySayAnyDevice) {
  // sgd without momentum keeps no state: a strategy may pass a default (host) empty view.
  const sgd::SgdOptimizer sgd(sgd::SgdConfig{});
  const std::vector<float> start = values(64, 1, 2.0F);
  Tensor params = gpu_copy(start);
  const Tensor grads = gpu_copy(values(64, 2, 1.0F));
  sgd.step(params.view(), grads.view(), BufferView{}, StepInfo{1, kLr});
  EXPECT_NE(host_copy(params), start);
}

TEST_F(CudaOptimizers, RefuseViewsOnMixedDevicesBeforeTouchingThem) {
  const adam::AdamOptimizer adam(adam::AdamConfig{});
  const std::vector<float> start = values(64, 1, 2.0F);
  Tensor params = gpu_copy(start);
  std::vector<float> host_grads = values(64, 2, 1.0F);
  Tensor state = gpu_copy(std::vector<float>(128, 0.0F));
  try {
    adam.step(params.view(), view_of(std::span<float>(host_grads)), state.view(), StepInfo{1, kLr});
    ADD_FAILURE() << "adam stepped with cuda:0 parameters and host gradients";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("parameters are on cuda:0"), std::string::npos) << message;
    EXPECT_NE(message.find("gradients on cpu"), std::string::npos) << message;
  }
  EXPECT_EQ(host_copy(params), start);
  // And the other way round: host parameters with device state.
  std::vector<float> host_params = start;
  const Tensor grads = gpu_copy(host_grads);
  EXPECT_THROW(adam.step(view_of(std::span<float>(host_params)), grads.view(), state.view(),
                         StepInfo{1, kLr}),
               InvalidArgument);
  EXPECT_EQ(host_params, start);
}

TEST_F(CudaOptimizers, RefuseAViewThatSaysCudaOverHostMemory) {
  const rmsprop::RmspropOptimizer rmsprop(rmsprop::RmspropConfig{});
  std::vector<float> p = values(16, 1, 2.0F);
  const std::vector<float> start = p;
  const Tensor grads = gpu_copy(values(16, 2, 1.0F));
  Tensor state = gpu_copy(std::vector<float>(16, 0.0F));
  BufferView lying = view_of(std::span<float>(p));
  lying.device = Device::cuda(0);
  try {
    rmsprop.step(lying, grads.view(), state.view(), StepInfo{1, kLr});
    ADD_FAILURE() << "rmsprop stepped on host memory that says cuda:0";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("host memory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(p, start);
}

TEST(CudaOptimizersRefusal, RefuseADeviceThisProcessDoesNotSee) {
  // Needs no GPU: the ordinal past the last visible device is refused by name, memory untouched.
  const int unseen = tessera::cuda::device_count();
  const std::string where = "cuda:" + std::to_string(unseen);
  const sgd::SgdOptimizer sgd(sgd::SgdConfig{0.9F, 0.0F, 0.0F, false});
  EXPECT_FALSE(sgd.runs_on(Device::cuda(unseen)));
  std::vector<float> p(4, 1.0F), g(4, 0.5F), s(4, 0.0F);
  auto on_unseen = [&](std::vector<float>& v) {
    return BufferView{v.data(), v.size(), DType::f32, Device::cuda(unseen)};
  };
  try {
    sgd.step(on_unseen(p), on_unseen(g), on_unseen(s), StepInfo{1, kLr});
    ADD_FAILURE() << "sgd stepped on " << where;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
  }
  EXPECT_EQ(p, std::vector<float>(4, 1.0F));
}

}  // namespace
}  // namespace tessera
