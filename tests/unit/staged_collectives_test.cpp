// The staged collectives (tessera/transport_kit/staged_collectives.hpp, the algorithms of the shm
// transport and of ucx's mapped memory) over a staging buffer of 64 bytes, so that every
// operation runs in several rounds and most end on a partial one. The transports' default
// staging holds 128 KiB per rank, more than most test data: a round or a chunk tail handled
// wrongly would go unseen there. Ranks are threads sharing the staging memory, as processes
// share shm's segment. Values are small integers stored as floats, so every sum is exact in any
// order and a wrong value can only come from a wrong place.
#include "tessera/transport_kit/staged_collectives.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace tessera {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t kStagingBytes = 64;  // 16 floats: a round of all_reduce and all_gather

// What every rank of the group can read: two staging buffers and one progress counter a rank.
class SharedStaging {
 public:
  SharedStaging(int size, std::size_t staging_bytes)
      : size_(size),
        staging_bytes_(staging_bytes),
        buffers_(static_cast<std::size_t>(size) * 2 * staging_bytes),
        progress_(static_cast<std::size_t>(size)) {
    for (auto& progress : progress_) progress.store(staging::kInitialProgress);
  }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] std::size_t staging_bytes() const noexcept { return staging_bytes_; }
  [[nodiscard]] std::byte* buffer(int rank, std::uint64_t step) {
    const auto index = static_cast<std::size_t>(rank) * 2 + step % 2;
    return buffers_.data() + index * staging_bytes_;
  }
  std::atomic<std::uint64_t>& progress(int rank) {
    return progress_[static_cast<std::size_t>(rank)];
  }

 private:
  int size_;
  std::size_t staging_bytes_;
  std::vector<std::byte> buffers_;
  std::vector<std::atomic<std::uint64_t>> progress_;
};

// One rank's view of the shared staging: the `Stage` the algorithms are written against.
class RankStage {
 public:
  RankStage(SharedStaging& shared, int rank) : shared_(shared), rank_(rank) {}
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return shared_.size(); }
  std::uint64_t next_step() noexcept { return step_++; }
  [[nodiscard]] std::byte* staging(int rank, std::uint64_t step) const {
    return shared_.buffer(rank, step);
  }
  [[nodiscard]] std::size_t staging_bytes() const noexcept { return shared_.staging_bytes(); }
  void publish(std::uint64_t progress) {
    shared_.progress(rank_).store(progress, std::memory_order_release);
  }
  void await_all(std::uint64_t target) {
    for (int peer = 0; peer < size(); ++peer) await_rank(peer, target);
  }
  // A deadline, so that a rank left waiting by a failed peer fails instead of hanging the test.
  void await_rank(int peer, std::uint64_t target) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (shared_.progress(peer).load(std::memory_order_acquire) < target) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("rank " + std::to_string(rank_) + " waited 10 s for rank " +
                                 std::to_string(peer) + " to reach progress " +
                                 std::to_string(target));
      }
      std::this_thread::yield();
    }
  }

 private:
  SharedStaging& shared_;
  int rank_;
  std::uint64_t step_ = staging::kFirstStep;
};

// Runs `body(stage, rank)` on `size` threads sharing one staging; rethrows the first failure.
template <class Body>
void run_group(int size, Body body) {
  SharedStaging shared(size, kStagingBytes);
  std::vector<std::future<void>> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.push_back(std::async(std::launch::async, [&shared, &body, r] {
      RankStage stage(shared, r);
      body(stage, r);
    }));
  }
  for (auto& rank : ranks) rank.get();
}

// Element i of rank r's input: distinct across ranks and positions, exact when summed.
float value(int rank, std::size_t i) {
  return static_cast<float>((rank + 1) * 1000 + static_cast<int>(i % 997));
}

std::vector<float> input_of(int rank, std::size_t count) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = value(rank, i);
  return values;
}

BufferView view(std::vector<float>& values) {
  return {values.data(), values.size(), DType::f32, Device::cpu()};
}

constexpr int kSizes[] = {2, 3, 4};
// Around and across the 16-float rounds of all_reduce and chunks of all_gather and broadcast.
constexpr std::size_t kCounts[] = {1, 15, 16, 17, 33, 50};
// A chunk of reduce_scatter is kStagingBytes / (ranks x 4) floats: 8, 5 and 4 for 2, 3 and 4
// ranks. Blocks below, at and above it, and several chunks with a partial last one.
constexpr std::size_t kBlocks[] = {1, 4, 5, 7, 8, 9, 13, 17};

TEST(StagedCollectivesOverTinyStaging, AllReduceSumsEveryElementOfFullRoundsAndTheLastPartialOne) {
  for (const int n : kSizes) {
    for (const std::size_t count : kCounts) {
      std::vector<std::vector<float>> data(static_cast<std::size_t>(n));
      for (int r = 0; r < n; ++r) data[static_cast<std::size_t>(r)] = input_of(r, count);
      run_group(n, [&](RankStage& stage, int r) {
        staging::all_reduce(stage, view(data[static_cast<std::size_t>(r)]), ReduceOp::sum);
      });
      for (std::size_t i = 0; i < count; ++i) {
        float expected = 0.0F;
        for (int r = 0; r < n; ++r) expected += value(r, i);
        for (int r = 0; r < n; ++r) {
          ASSERT_EQ(data[static_cast<std::size_t>(r)][i], expected)
              << n << " ranks, " << count << " elements: element " << i << " on rank " << r;
        }
      }
    }
  }
}

TEST(StagedCollectivesOverTinyStaging, ReduceScatterGivesEachRankItsBlockAcrossChunksAndTheTail) {
  for (const int n : kSizes) {
    for (const std::size_t block : kBlocks) {
      for (const bool in_place : {false, true}) {
        const std::size_t total = block * static_cast<std::size_t>(n);
        std::vector<std::vector<float>> inputs(static_cast<std::size_t>(n));
        std::vector<std::vector<float>> outputs(static_cast<std::size_t>(n),
                                                std::vector<float>(block, -1.0F));
        for (int r = 0; r < n; ++r) inputs[static_cast<std::size_t>(r)] = input_of(r, total);
        run_group(n, [&](RankStage& stage, int r) {
          auto& input = inputs[static_cast<std::size_t>(r)];
          const BufferView output =
              in_place ? view(input).slice(static_cast<std::size_t>(r) * block, block)
                       : view(outputs[static_cast<std::size_t>(r)]);
          staging::reduce_scatter(stage, view(input), output, ReduceOp::sum);
        });
        for (int r = 0; r < n; ++r) {
          for (std::size_t i = 0; i < block; ++i) {
            const std::size_t at = static_cast<std::size_t>(r) * block + i;
            float expected = 0.0F;
            for (int j = 0; j < n; ++j) expected += value(j, at);
            const float got = in_place ? inputs[static_cast<std::size_t>(r)][at]
                                       : outputs[static_cast<std::size_t>(r)][i];
            ASSERT_EQ(got, expected)
                << n << " ranks, blocks of " << block << (in_place ? " in place" : "")
                << ": element " << i << " of rank " << r << "'s block";
          }
        }
      }
    }
  }
}

TEST(StagedCollectivesOverTinyStaging, AllGatherPlacesEveryChunkOfEveryRanksBlock) {
  for (const int n : kSizes) {
    for (const std::size_t block : kCounts) {
      std::vector<std::vector<float>> inputs(static_cast<std::size_t>(n));
      std::vector<std::vector<float>> outputs(
          static_cast<std::size_t>(n), std::vector<float>(block * static_cast<std::size_t>(n)));
      for (int r = 0; r < n; ++r) inputs[static_cast<std::size_t>(r)] = input_of(r, block);
      run_group(n, [&](RankStage& stage, int r) {
        staging::all_gather(stage, view(inputs[static_cast<std::size_t>(r)]),
                            view(outputs[static_cast<std::size_t>(r)]));
      });
      for (int r = 0; r < n; ++r) {
        for (int j = 0; j < n; ++j) {
          for (std::size_t i = 0; i < block; ++i) {
            ASSERT_EQ(outputs[static_cast<std::size_t>(r)][static_cast<std::size_t>(j) * block + i],
                      value(j, i))
                << n << " ranks, blocks of " << block << ": element " << i << " of rank " << j
                << "'s block on rank " << r;
          }
        }
      }
    }
  }
}

TEST(StagedCollectivesOverTinyStaging, BroadcastCopiesEveryChunkFromEveryRoot) {
  for (const int n : kSizes) {
    for (const std::size_t count : kCounts) {
      for (int root = 0; root < n; ++root) {
        std::vector<std::vector<float>> data(static_cast<std::size_t>(n),
                                             std::vector<float>(count, -1.0F));
        data[static_cast<std::size_t>(root)] = input_of(root, count);
        run_group(n, [&](RankStage& stage, int r) {
          staging::broadcast(stage, view(data[static_cast<std::size_t>(r)]), root);
        });
        for (int r = 0; r < n; ++r) {
          for (std::size_t i = 0; i < count; ++i) {
            ASSERT_EQ(data[static_cast<std::size_t>(r)][i], value(root, i))
                << n << " ranks, " << count << " elements from root " << root << ": element " << i
                << " on rank " << r;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tessera
