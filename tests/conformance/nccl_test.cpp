// What only the nccl transport has: without a GPU it refuses to connect, saying why; with one,
// its communicators move device memory only, a connect short of a rank times out naming it,
// and wait_on_stream orders the default stream after an operation without blocking the host.
// The rest of the suite runs over nccl through host staging (staged.hpp) where GPUs are seen.

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>

#include "memory_store.hpp"
#include "reference.hpp"
#include "tessera/base/error.hpp"
#include "tessera/plugin/device_memory_source.hpp"
#include "tessera/plugin/store.hpp"
#include "world.hpp"

namespace tessera::conformance {
namespace {

using std::chrono::milliseconds;

// The words every refusal for want of a GPU starts with (cuda_device.hpp, require).
constexpr const char* kNeedsAGpu = "needs a CUDA device";

bool has_gpu(std::string* why = nullptr) {
  const auto reason = unavailable("nccl", 1);
  if (reason && why != nullptr) *why = *reason;
  return !reason;
}

// On this machine with no GPU (CI): the plugin loads, and connecting says what is missing and
// what to use instead, within the connect call (no hang, no crash).
TEST(NcclTransport, WithoutAGpuConnectRefusesSayingWhatIsMissingAndWhatToDo) {
  if (has_gpu()) GTEST_SKIP() << "a GPU is visible: the suites over nccl run instead";
  auto transport = load_transport("nccl", milliseconds(2000));
  try {
    (void)transport->connect(memory::make_memory_store(), 0, 1, milliseconds(2000));
    FAIL() << "connected without a GPU";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(kNeedsAGpu), std::string::npos) << what;
    EXPECT_NE(what.find("shm"), std::string::npos) << "names the CPU transports: " << what;
    EXPECT_EQ(what.find(".cpp"), std::string::npos) << "no source path: " << what;
  }
  try {
    (void)memory_for(*transport, Device::cuda(0));
    FAIL() << "an allocator of cuda:0 without a GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(kNeedsAGpu), std::string::npos) << e.what();
  }
  // Host memory is always to be had, for staging.
  EXPECT_EQ(memory_for(*transport, Device::cpu())->device(), Device::cpu());
}

class NcclOnAGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!has_gpu(&why)) GTEST_SKIP() << why;
    transport_ = load_transport("nccl", kTimeout);
    world_ = transport_->connect(memory::make_memory_store(), 0, 1, kTimeout);
    memory_ = memory_for(*transport_, Device::cuda(0));
  }
  std::shared_ptr<Transport> transport_;
  std::shared_ptr<Communicator> world_;
  std::shared_ptr<DeviceAllocator> memory_;
};

TEST_F(NcclOnAGpu, MovesItsGpusMemoryOnlyAndRefusesHostBuffersAtIssue) {
  EXPECT_TRUE(world_->moves(Device::cuda(0)));
  EXPECT_FALSE(world_->moves(Device::cpu()));
  EXPECT_FALSE(world_->moves(Device::cuda(1)));
  float host = 1.0F;
  try {
    (void)world_->all_reduce({&host, 1, DType::f32, Device::cpu()}, ReduceOp::sum);
    FAIL() << "a host buffer was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << e.what();
  }
  // Still usable: a device operation completes, as device work.
  void* word = memory_->allocate(sizeof(float));
  auto work = world_->all_reduce({word, 1, DType::f32, Device::cuda(0)}, ReduceOp::sum);
  EXPECT_TRUE(work->on_device());
  work->wait(kTimeout);
  memory_->deallocate(word, sizeof(float));
}

// 64 MiB gathered out of place, then read back by a copy on the default stream that follows
// only wait_on_stream, not a host wait: without the ordering the copy would race the gather
// and read the zeros the allocator filled the output with.
TEST_F(NcclOnAGpu, WaitOnStreamOrdersTheDefaultStreamAfterTheOperation) {
  constexpr std::size_t kCount = std::size_t{16} << 20;
  Bytes values = make_values(DType::f32, kCount, 42);
  void* in = memory_->allocate(kCount * 4);
  void* out = memory_->allocate(kCount * 4);
  const BufferView device_in{in, kCount, DType::f32, Device::cuda(0)};
  const BufferView device_out{out, kCount, DType::f32, Device::cuda(0)};
  memory_->copy(device_in, view(values, DType::f32));
  for (int round = 0; round < 3; ++round) {
    auto work = world_->all_gather(device_in, device_out);
    work->wait_on_stream(Stream{Device::cuda(0), nullptr});
    Bytes back(kCount * 4);
    memory_->copy(view(back, DType::f32), device_out);  // on the default stream
    ASSERT_EQ(first_difference(back, values, DType::f32), "") << "round " << round;
    work->wait(kTimeout);
    Bytes zeros(kCount * 4);
    memory_->copy(device_out, view(zeros, DType::f32));
  }
  EXPECT_THROW(world_->barrier()->wait_on_stream(Stream{Device::cuda(1), nullptr}),
               InvalidArgument);
  memory_->deallocate(in, kCount * 4);
  memory_->deallocate(out, kCount * 4);
}

// Rank 0 of a world of two, on the one GPU: rank 1 never comes, and connect ends within its
// timeout naming rank 1, instead of waiting in NCCL's initialisation for ever.
TEST_F(NcclOnAGpu, ConnectShortOfARankTimesOutNamingIt) {
  const auto start = std::chrono::steady_clock::now();
  try {
    (void)transport_->connect(memory::make_memory_store(), 0, 2, milliseconds(1500));
    FAIL() << "connected without rank 1";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("never arrived: 1"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
}

// abort() fails what follows with its reason, at once; it may be called again.
TEST_F(NcclOnAGpu, AnAbortFailsThePendingAndEveryLaterOperationWithItsReason) {
  void* word = memory_->allocate(sizeof(float));
  const BufferView one{word, 1, DType::f32, Device::cuda(0)};
  world_->abort("stop the world");
  try {
    world_->all_reduce(one, ReduceOp::sum)->wait(kTimeout);
    FAIL() << "an all_reduce after abort completed";
  } catch (const TransportError& e) {
    EXPECT_NE(std::string(e.what()).find("stop the world"), std::string::npos) << e.what();
  }
  EXPECT_THROW(world_->barrier()->wait(kTimeout), TransportError);
  world_->abort("again");  // idempotent
  memory_->deallocate(word, sizeof(float));
}

}  // namespace
}  // namespace tessera::conformance
