// StrategySetup::allocator: every strategy takes its parameters, gradients and optimizer state
// (and the buffers its collectives fill with them) from the allocator it is given, and refuses,
// before allocating anything, an allocator of a device its communicator or optimizer cannot
// reach.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>

#include "ddp_strategy.hpp"
#include "ddp_test_support.hpp"
#include "hybrid_strategy.hpp"
#include "tessera/base/error.hpp"
#include "zero3_strategy.hpp"
#include "zero_strategy.hpp"
#include "zero_test_support.hpp"

namespace tessera {
namespace {

using testing::kTestTimeout;

// Hands out host memory (from cpu_allocator()) under any device's name and counts the bytes
// asked for: those still live, the most live at once, and how many allocations were made.
class CountingAllocator final : public DeviceAllocator {
 public:
  explicit CountingAllocator(Device device) : device_(device) {}

  [[nodiscard]] Device device() const noexcept override { return device_; }
  [[nodiscard]] void* allocate(std::size_t bytes) override {
    void* p = host_->allocate(bytes);
    const std::lock_guard lock(mutex_);
    live_ += bytes;
    peak_ = std::max(peak_, live_);
    ++allocations_;
    return p;
  }
  void deallocate(void* pointer, std::size_t bytes) noexcept override {
    host_->deallocate(pointer, bytes);
    const std::lock_guard lock(mutex_);
    live_ -= bytes;
  }
  void copy(BufferView dst, BufferView src) const override {
    dst.device = src.device = Device::cpu();
    host_->copy(dst, src);
  }

  [[nodiscard]] std::size_t live_bytes() const {
    const std::lock_guard lock(mutex_);
    return live_;
  }
  [[nodiscard]] std::size_t peak_bytes() const {
    const std::lock_guard lock(mutex_);
    return peak_;
  }
  [[nodiscard]] std::size_t allocations() const {
    const std::lock_guard lock(mutex_);
    return allocations_;
  }

 private:
  Device device_;
  std::shared_ptr<DeviceAllocator> host_ = cpu_allocator();
  mutable std::mutex mutex_;
  std::size_t live_ = 0;
  std::size_t peak_ = 0;
  std::size_t allocations_ = 0;
};

// A communicator of two ranks that says it moves cuda:0 buffers; the setup under test never
// gets as far as issuing an operation on it.
// A GPU no machine has: where tessera is built with CUDA, optimizers run on every GPU the
// process sees, so a device no optimizer runs on has to be one that is not there.
constexpr Device kUnseenGpu = Device::cuda(1 << 16);

class CudaMovingCommunicator final : public Communicator {
 public:
  int rank() const noexcept override { return 0; }
  int size() const noexcept override { return 2; }
  Duration timeout() const noexcept override { return kTestTimeout; }
  bool moves(Device device) const noexcept override {
    return device == Device::cpu() || device == Device::cuda(0) || device == kUnseenGpu;
  }
  void abort(const std::string&) noexcept override {}

 protected:
  std::shared_ptr<Work> do_all_reduce(BufferView, ReduceOp) override { return refuse(); }
  std::shared_ptr<Work> do_reduce_scatter(BufferView, BufferView, ReduceOp) override {
    return refuse();
  }
  std::shared_ptr<Work> do_all_gather(BufferView, BufferView) override { return refuse(); }
  std::shared_ptr<Work> do_broadcast(BufferView, int) override { return refuse(); }
  std::shared_ptr<Work> do_send(BufferView, int, std::uint32_t) override { return refuse(); }
  std::shared_ptr<Work> do_recv(BufferView, int, std::uint32_t) override { return refuse(); }
  std::shared_ptr<Work> do_barrier() override { return refuse(); }
  std::unique_ptr<Communicator> do_split(int, int) override { return nullptr; }

 private:
  static std::shared_ptr<Work> refuse() {
    throw InvalidArgument("CudaMovingCommunicator: no operation expected in this test");
  }
};

enum class Kind { ddp, zero1, zero2, zero2_micro_batches, zero3, hybrid };

std::string name_of(Kind kind) {
  switch (kind) {
    case Kind::ddp: return "ddp";
    case Kind::zero1: return "zero1";
    case Kind::zero2: return "zero2";
    case Kind::zero2_micro_batches: return "zero2_micro_batches";
    case Kind::zero3: return "zero3";
    case Kind::hybrid: return "hybrid_pp2";
  }
  return "?";
}

std::unique_ptr<Strategy> make(Kind kind) {
  if (kind == Kind::ddp) {
    ddp::DdpConfig config;
    config.sync.first_bucket_bytes = 8192;
    config.sync.bucket_cap_bytes = 32768;
    return std::make_unique<ddp::DdpStrategy>(config);
  }
  if (kind == Kind::zero3) return std::make_unique<zero3::Zero3Strategy>(zero3::Zero3Config{});
  if (kind == Kind::hybrid) {
    hybrid::HybridConfig config;  // two pipeline stages of the two ranks
    config.pipeline_parallel = 2;
    return std::make_unique<hybrid::HybridStrategy>(config);
  }
  zero::ZeroConfig config;
  config.stage = kind == Kind::zero1 ? zero::ZeroStage::one : zero::ZeroStage::two;
  config.first_bucket_bytes = 16384;
  config.bucket_cap_bytes = 32768;
  return std::make_unique<zero::ZeroStrategy>(config);
}

StrategySetup setup_for(Kind kind, std::shared_ptr<Communicator> world,
                        std::shared_ptr<DeviceAllocator> allocator) {
  StrategySetup setup{std::move(world), testing::zero_test_mlp(), testing::zero_test_adam(), 5};
  setup.micro_batches = kind == Kind::zero2_micro_batches ? 2 : 1;
  setup.allocator = std::move(allocator);
  return setup;
}

// What the strategy should hold through its allocator between steps: everything
// memory_report() counts as parameters, gradients and optimizer state, plus the buffers of
// those that collectives fill. ddp's report.buffer_bytes is the synchronizer's staging, which
// its adjacent gradients never need (0, asserted); zero1 has none; zero2's are its gradient
// windows. zero3's are its gather pool, plus the norm's few host scratch blocks, so its pool is
// counted on its own.
std::size_t expected_bytes(const Strategy& strategy, Kind kind) {
  const auto report = strategy.memory_report();
  const std::size_t state =
      report.parameter_bytes + report.gradient_bytes + report.optimizer_state_bytes;
  if (kind == Kind::zero3) {
    const auto& zero3 = dynamic_cast<const zero3::Zero3Strategy&>(strategy);
    return state + zero3.pool_buffers() * zero3.plan().largest_gathered * sizeof(float);
  }
  if (kind == Kind::ddp || kind == Kind::zero1) {
    EXPECT_EQ(report.buffer_bytes, 0U);
  }
  return state + report.buffer_bytes;
}

StepStats train_one_step(Strategy& strategy, int rank) {
  constexpr std::size_t kRows = 8;
  static const auto data = testing::zero_test_data();
  const auto rows = testing::consecutive(static_cast<std::size_t>(rank) * kRows, kRows);
  return strategy.train_step(data->gather(Split::train, rows), StepInfo{1, 1e-3F, 2 * kRows});
}

class StrategyAllocator : public ::testing::TestWithParam<Kind> {};

TEST_P(StrategyAllocator, HoldsExactlyItsReportedStateThroughTheGivenAllocator) {
  const Kind kind = GetParam();
  testing::run_ranks(2, [kind](std::shared_ptr<Communicator> world) {
    const int rank = world->rank();
    SCOPED_TRACE(name_of(kind) + ", rank " + std::to_string(rank));
    auto allocator = std::make_shared<CountingAllocator>(Device::cpu());
    auto strategy = make(kind);
    strategy->setup(setup_for(kind, world, allocator));
    const auto report = strategy->memory_report();
    ASSERT_GT(report.parameter_bytes, 0U);
    ASSERT_GT(report.gradient_bytes, 0U);
    ASSERT_GT(report.optimizer_state_bytes, 0U);
    EXPECT_EQ(allocator->live_bytes(), expected_bytes(*strategy, kind)) << "after setup";

    // A step allocates what it needs (zero3's pool, zero2's accumulation buffer) through the
    // same allocator and gives back what lives only during the step.
    train_one_step(*strategy, rank);
    EXPECT_EQ(allocator->live_bytes(), expected_bytes(*strategy, kind)) << "after a step";
    if (kind == Kind::zero3) {
      EXPECT_GT(dynamic_cast<zero3::Zero3Strategy&>(*strategy).pool_buffers(), 0U);
    }
    if (kind == Kind::zero2_micro_batches) {
      // The full padded gradient accumulates across micro-batches, padded like the parameters.
      const auto after = strategy->memory_report();
      EXPECT_GE(allocator->peak_bytes(), expected_bytes(*strategy, kind) + after.parameter_bytes);
    }
    // Everything the strategy took goes back when it dies.
    strategy.reset();
    EXPECT_EQ(allocator->live_bytes(), 0U) << "after the strategy died";
  });
}

TEST_P(StrategyAllocator, RefusesAnAllocatorOfADeviceTheTransportCannotMove) {
  const Kind kind = GetParam();
  testing::run_ranks(2, [kind](std::shared_ptr<Communicator> world) {
    SCOPED_TRACE(name_of(kind) + ", rank " + std::to_string(world->rank()));
    auto cuda = std::make_shared<CountingAllocator>(Device::cuda(0));
    auto strategy = make(kind);
    try {
      strategy->setup(setup_for(kind, world, cuda));
      ADD_FAILURE() << "setup accepted cuda:0 memory over the local transport";
    } catch (const InvalidArgument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("cuda:0"), std::string::npos) << message;
      EXPECT_NE(message.find("transport cannot move"), std::string::npos) << message;
      EXPECT_NE(message.find("cpu_allocator()"), std::string::npos) << message;
    }
    EXPECT_EQ(cuda->allocations(), 0U) << "memory taken before the device was checked";
  });
}

TEST_P(StrategyAllocator, RefusesAnAllocatorOfADeviceTheOptimizerCannotRunOn) {
  const Kind kind = GetParam();
  // The communicator moves the unseen GPU, but Adam cannot update memory there.
  auto cuda = std::make_shared<CountingAllocator>(kUnseenGpu);
  auto strategy = make(kind);
  try {
    strategy->setup(setup_for(kind, std::make_shared<CudaMovingCommunicator>(), cuda));
    ADD_FAILURE() << "setup accepted memory of a GPU the optimizer cannot run on";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(to_string(kUnseenGpu)), std::string::npos) << message;
    EXPECT_NE(message.find("optimizer cannot update"), std::string::npos) << message;
  }
  EXPECT_EQ(cuda->allocations(), 0U);
}

TEST(StrategyAllocator, NullMeansTheHostAllocator) {
  testing::run_ranks(2, [](std::shared_ptr<Communicator> world) {
    ddp::DdpStrategy strategy(ddp::DdpConfig{});
    strategy.setup(setup_for(Kind::ddp, world, nullptr));
    EXPECT_EQ(strategy.parameters().size(), FlatLayout::of(*testing::zero_test_mlp()).total);
  });
}

INSTANTIATE_TEST_SUITE_P(EveryDataParallelStrategy, StrategyAllocator,
                         ::testing::Values(Kind::ddp, Kind::zero1, Kind::zero2,
                                           Kind::zero2_micro_batches, Kind::zero3, Kind::hybrid),
                         [](const auto& param) { return name_of(param.param); });

}  // namespace
}  // namespace tessera
