// Collectives against the reference: every dtype, every reduce op, odd element counts, results
// bitwise equal to the rank-order reference on every rank (hence identical across ranks).

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "reference.hpp"
#include "tessera/base/error.hpp"
#include "world.hpp"

namespace tessera::conformance {
namespace {

class Collectives : public ::testing::TestWithParam<WorldParam> {
 protected:
  void SetUp() override {
    if (const auto why = unavailable(GetParam().transport, GetParam().size)) GTEST_SKIP() << *why;
    world_ = std::make_unique<World>(GetParam().transport, GetParam().size, kTimeout,
                                     GetParam().options());
  }
  [[nodiscard]] int size() const { return GetParam().size; }
  std::unique_ptr<World> world_;
};

// Counts straddle every chunking edge a transport might use: empty, one element, fewer
// elements than ranks, odd sizes around powers of two.
constexpr std::size_t kCounts[] = {0, 1, 7, 1023, 65537};
constexpr std::size_t kBlockCounts[] = {0, 1, 7, 1023, 4099};

std::uint64_t seed_of(int rank, DType dtype, std::size_t count, int salt) {
  return (static_cast<std::uint64_t>(rank) << 40) ^ (static_cast<std::uint64_t>(dtype) << 32) ^
         (count << 4) ^ static_cast<std::uint64_t>(salt);
}

TEST_P(Collectives, AllReduceEqualsTheRankOrderReferenceBitwiseOnEveryRank) {
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : kAllReduceOps) {
      for (std::size_t count : kCounts) {
        std::vector<Bytes> inputs;
        for (int r = 0; r < size(); ++r)
          inputs.push_back(make_values(dtype, count, seed_of(r, dtype, count, 1)));
        const Bytes expected = reference_reduce(inputs, dtype, op, 0, count);

        std::vector<Bytes> data = inputs;
        std::vector<std::shared_ptr<Work>> works;
        for (int r = 0; r < size(); ++r) {
          works.push_back(
              world_->rank(r).all_reduce(view(data[static_cast<std::size_t>(r)], dtype), op));
        }
        wait_all(works);
        for (int r = 0; r < size(); ++r) {
          ASSERT_EQ(first_difference(data[static_cast<std::size_t>(r)], expected, dtype), "")
              << "rank " << r << " all_reduce " << reduce_op_name(op) << " " << count << " x "
              << dtype_name(dtype);
        }
      }
    }
  }
}

TEST_P(Collectives, ReduceScatterGivesEachRankTheReferenceOfItsBlock) {
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : kAllReduceOps) {
      for (std::size_t block : kBlockCounts) {
        const std::size_t total = block * static_cast<std::size_t>(size());
        std::vector<Bytes> inputs;
        for (int r = 0; r < size(); ++r)
          inputs.push_back(make_values(dtype, total, seed_of(r, dtype, block, 2)));
        std::vector<Bytes> outputs(static_cast<std::size_t>(size()),
                                   Bytes(block * dtype_size(dtype)));
        std::vector<std::shared_ptr<Work>> works;
        for (int r = 0; r < size(); ++r) {
          const auto i = static_cast<std::size_t>(r);
          works.push_back(
              world_->rank(r).reduce_scatter(view(inputs[i], dtype), view(outputs[i], dtype), op));
        }
        wait_all(works);
        for (int r = 0; r < size(); ++r) {
          const Bytes expected =
              reference_reduce(inputs, dtype, op, static_cast<std::size_t>(r) * block, block);
          ASSERT_EQ(first_difference(outputs[static_cast<std::size_t>(r)], expected, dtype), "")
              << "rank " << r << " reduce_scatter " << reduce_op_name(op) << " block " << block
              << " x " << dtype_name(dtype);
        }
      }
    }
  }
}

// In place: the output is block rank() of the input, the layout ZeRO-2 uses for gradients.
TEST_P(Collectives, ReduceScatterInPlaceMatchesOutOfPlace) {
  const DType dtype = DType::f32;
  for (std::size_t block : kBlockCounts) {
    const std::size_t total = block * static_cast<std::size_t>(size());
    std::vector<Bytes> inputs;
    for (int r = 0; r < size(); ++r)
      inputs.push_back(make_values(dtype, total, seed_of(r, dtype, block, 3)));
    std::vector<Bytes> data = inputs;
    std::vector<std::shared_ptr<Work>> works;
    for (int r = 0; r < size(); ++r) {
      BufferView all = view(data[static_cast<std::size_t>(r)], dtype);
      works.push_back(world_->rank(r).reduce_scatter(
          all, all.slice(static_cast<std::size_t>(r) * block, block), ReduceOp::sum));
    }
    wait_all(works);
    for (int r = 0; r < size(); ++r) {
      const std::size_t offset = static_cast<std::size_t>(r) * block;
      const Bytes expected = reference_reduce(inputs, dtype, ReduceOp::sum, offset, block);
      const auto& d = data[static_cast<std::size_t>(r)];
      const Bytes actual(d.begin() + static_cast<std::ptrdiff_t>(offset * 4),
                         d.begin() + static_cast<std::ptrdiff_t>((offset + block) * 4));
      ASSERT_EQ(first_difference(actual, expected, dtype), "")
          << "rank " << r << " block " << block;
    }
  }
}

TEST_P(Collectives, AllGatherConcatenatesEveryRanksInputInRankOrder) {
  for (DType dtype : kAllDTypes) {
    for (std::size_t block : kBlockCounts) {
      std::vector<Bytes> inputs;
      Bytes expected;
      for (int r = 0; r < size(); ++r) {
        inputs.push_back(make_values(dtype, block, seed_of(r, dtype, block, 4)));
        expected.insert(expected.end(), inputs.back().begin(), inputs.back().end());
      }
      std::vector<Bytes> outputs(static_cast<std::size_t>(size()), Bytes(expected.size()));
      std::vector<std::shared_ptr<Work>> works;
      for (int r = 0; r < size(); ++r) {
        const auto i = static_cast<std::size_t>(r);
        works.push_back(
            world_->rank(r).all_gather(view(inputs[i], dtype), view(outputs[i], dtype)));
      }
      wait_all(works);
      for (int r = 0; r < size(); ++r) {
        ASSERT_EQ(first_difference(outputs[static_cast<std::size_t>(r)], expected, dtype), "")
            << "rank " << r << " all_gather " << block << " x " << dtype_name(dtype);
      }
    }
  }
}

// In place: each rank's input already sits at block rank() of its output (ZeRO-3's gather).
TEST_P(Collectives, AllGatherInPlaceFillsTheOtherBlocks) {
  const std::size_t block = 1023;
  std::vector<Bytes> data(static_cast<std::size_t>(size()),
                          Bytes(block * 8 * static_cast<std::size_t>(size())));
  Bytes expected;
  for (int r = 0; r < size(); ++r) {
    const Bytes mine = make_values(DType::f64, block, seed_of(r, DType::f64, block, 5));
    std::memcpy(data[static_cast<std::size_t>(r)].data() + static_cast<std::size_t>(r) * block * 8,
                mine.data(), mine.size());
    expected.insert(expected.end(), mine.begin(), mine.end());
  }
  std::vector<std::shared_ptr<Work>> works;
  for (int r = 0; r < size(); ++r) {
    BufferView all = view(data[static_cast<std::size_t>(r)], DType::f64);
    works.push_back(
        world_->rank(r).all_gather(all.slice(static_cast<std::size_t>(r) * block, block), all));
  }
  wait_all(works);
  for (int r = 0; r < size(); ++r) {
    ASSERT_EQ(first_difference(data[static_cast<std::size_t>(r)], expected, DType::f64), "")
        << "rank " << r;
  }
}

TEST_P(Collectives, BroadcastFromEveryRootCopiesTheRootsDataEverywhere) {
  for (int root = 0; root < size(); ++root) {
    for (DType dtype : kAllDTypes) {
      for (std::size_t count : kBlockCounts) {
        std::vector<Bytes> data;
        for (int r = 0; r < size(); ++r)
          data.push_back(make_values(dtype, count, seed_of(r, dtype, count, 6)));
        const Bytes expected = data[static_cast<std::size_t>(root)];
        std::vector<std::shared_ptr<Work>> works;
        for (int r = 0; r < size(); ++r) {
          works.push_back(
              world_->rank(r).broadcast(view(data[static_cast<std::size_t>(r)], dtype), root));
        }
        wait_all(works);
        for (int r = 0; r < size(); ++r) {
          ASSERT_EQ(first_difference(data[static_cast<std::size_t>(r)], expected, dtype), "")
              << "rank " << r << " broadcast from " << root << " " << count << " x "
              << dtype_name(dtype);
        }
      }
    }
  }
}

// Issued back to back without waiting: operations of one communicator run in issue order.
TEST_P(Collectives, ManyOperationsInFlightCompleteInIssueOrder) {
  constexpr int kRounds = 16;
  std::vector<std::vector<Bytes>> data(kRounds);
  std::vector<Bytes> expected;
  std::vector<std::shared_ptr<Work>> works;
  for (int round = 0; round < kRounds; ++round) {
    for (int r = 0; r < size(); ++r)
      data[round].push_back(make_values(DType::f32, 257, seed_of(r, DType::f32, 257, 100 + round)));
    expected.push_back(reference_reduce(data[round], DType::f32, ReduceOp::sum, 0, 257));
  }
  for (int r = 0; r < size(); ++r) {
    for (int round = 0; round < kRounds; ++round) {
      works.push_back(world_->rank(r).all_reduce(
          view(data[round][static_cast<std::size_t>(r)], DType::f32), ReduceOp::sum));
    }
  }
  wait_all(works);
  for (int round = 0; round < kRounds; ++round) {
    for (int r = 0; r < size(); ++r) {
      ASSERT_EQ(
          first_difference(data[round][static_cast<std::size_t>(r)], expected[round], DType::f32),
          "")
          << "round " << round << " rank " << r;
    }
  }
}

// Ranks waiting for a late one spin, then sleep. The late rank's arrival must wake them, not
// their next timed poll (shm's poll_interval is 100 ms): otherwise every straggler would cost
// the whole group that long.
TEST_P(Collectives, ALateRankWakesThePeersAsleepWaitingForIt) {
  if (size() < 2) GTEST_SKIP() << "needs a peer that waits";
  using Clock = std::chrono::steady_clock;
  constexpr auto kLate = std::chrono::milliseconds(30);
  constexpr int kRounds = 5;
  std::vector<double> extra_ms;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<Bytes> data;
    for (int r = 0; r < size(); ++r)
      data.push_back(make_values(DType::f32, 256, seed_of(r, DType::f32, 256, 200 + round)));
    const Bytes expected = reference_reduce(data, DType::f32, ReduceOp::sum, 0, 256);
    std::vector<std::shared_ptr<Work>> works;
    const auto start = Clock::now();
    for (int r = 0; r + 1 < size(); ++r) {
      works.push_back(world_->rank(r).all_reduce(
          view(data[static_cast<std::size_t>(r)], DType::f32), ReduceOp::sum));
    }
    std::this_thread::sleep_for(kLate);
    works.push_back(
        world_->rank(size() - 1).all_reduce(view(data.back(), DType::f32), ReduceOp::sum));
    wait_all(works);
    extra_ms.push_back(
        std::chrono::duration<double, std::milli>(Clock::now() - start - kLate).count());
    for (int r = 0; r < size(); ++r)
      ASSERT_EQ(first_difference(data[static_cast<std::size_t>(r)], expected, DType::f32), "");
  }
  std::sort(extra_ms.begin(), extra_ms.end());
  EXPECT_LT(extra_ms[kRounds / 2], 50.0)
      << "median time past the late rank's arrival, in ms; the slowest round took "
      << extra_ms.back();
}

// Every transport here moves host memory only; a buffer on a device it does not move is refused
// when the operation is issued, naming the device, and the communicator stays usable.
TEST_P(Collectives, ABufferOnADeviceTheTransportDoesNotMoveIsRefusedAtIssueTime) {
  float value = 1.0F;
  const BufferView on_device{&value, 1, DType::f32, Device::cuda(0)};
  auto& rank0 = world_->rank(0);
  ASSERT_FALSE(rank0.moves(Device::cuda(0)));
  ASSERT_TRUE(rank0.moves(Device::cpu()));
  try {
    (void)rank0.all_reduce(on_device, ReduceOp::sum);
    FAIL() << "a cuda:0 buffer was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  const BufferView host{&value, 1, DType::f32, Device::cpu()};
  EXPECT_THROW((void)rank0.all_gather(on_device, host), InvalidArgument);
  EXPECT_THROW((void)rank0.broadcast(on_device, 0), InvalidArgument);
  if (size() > 1) {
    EXPECT_THROW((void)rank0.send(on_device, 1, 0), InvalidArgument);
  }
  // Nothing was issued, so a collective on every rank still works.
  std::vector<float> values(static_cast<std::size_t>(size()), 2.0F);
  std::vector<std::shared_ptr<Work>> works;
  for (int r = 0; r < size(); ++r) {
    works.push_back(world_->rank(r).all_reduce(
        {&values[static_cast<std::size_t>(r)], 1, DType::f32, Device::cpu()}, ReduceOp::sum));
  }
  wait_all(works);
  for (float v : values) EXPECT_EQ(v, 2.0F * static_cast<float>(size()));
}

// The core checks every argument once, for every transport alike (docs/architecture.md): a null
// buffer of a non-zero count is refused when issued, by each operation, and nothing is issued.
TEST_P(Collectives, ANullBufferIsRefusedAtIssueTimeByEveryOperation) {
  const BufferView null{nullptr, 4, DType::f32, Device::cpu()};
  std::vector<float> host_values(4 * static_cast<std::size_t>(size()), 1.0F);
  const BufferView host{host_values.data(), host_values.size(), DType::f32, Device::cpu()};
  const BufferView block{host_values.data(), 4, DType::f32, Device::cpu()};
  auto& rank0 = world_->rank(0);
  const auto refused = [](const std::function<void()>& issue) {
    try {
      issue();
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refused([&] { (void)rank0.all_reduce(null, ReduceOp::sum); }).find("all_reduce: null"),
            std::string::npos);
  EXPECT_NE(refused([&] {
              (void)rank0.reduce_scatter(host, null, ReduceOp::sum);
            }).find("reduce_scatter: null"),
            std::string::npos);
  EXPECT_NE(refused([&] { (void)rank0.all_gather(null, host); }).find("all_gather: null"),
            std::string::npos);
  EXPECT_NE(refused([&] {
              (void)rank0.all_gather(block, {nullptr, host.count, DType::f32, Device::cpu()});
            }).find("all_gather: null"),
            std::string::npos);
  EXPECT_NE(refused([&] { (void)rank0.broadcast(null, 0); }).find("broadcast: null"),
            std::string::npos);
  if (size() > 1) {
    EXPECT_NE(refused([&] { (void)rank0.send(null, 1, 0); }).find("send: null"), std::string::npos);
    EXPECT_NE(refused([&] { (void)rank0.recv(null, 1, 0); }).find("recv: null"), std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, Collectives, ::testing::ValuesIn(every_transport_and_size()),
                         param_name);
// Again with rounds of a few KiB, so that the sizes above span several chunks
// (chunk_edges_test.cpp puts sizes on and around the chunk edges themselves).
INSTANTIATE_TEST_SUITE_P(SmallChunks, Collectives,
                         ::testing::ValuesIn(every_small_chunk_setting_and_size()), param_name);

}  // namespace
}  // namespace tessera::conformance
