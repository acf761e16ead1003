// send/recv and barrier.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "../unit/blocked_call.hpp"
#include "reference.hpp"
#include "tessera/base/error.hpp"
#include "world.hpp"

namespace tessera::conformance {
namespace {

class PointToPoint : public ::testing::TestWithParam<WorldParam> {
 protected:
  void SetUp() override {
    if (const auto why = unavailable(GetParam().transport, GetParam().size)) GTEST_SKIP() << *why;
    world_ = std::make_unique<World>(GetParam().transport, GetParam().size, kTimeout,
                                     GetParam().options());
  }
  [[nodiscard]] int size() const { return GetParam().size; }
  std::unique_ptr<World> world_;
};

constexpr std::uint32_t kTags[] = {0, 7, 0xFFFFFFFFU};

// Every rank sends to its right neighbour before receiving from its left one, with several
// tags and two messages per tag: a transport whose send waited for the matching recv would
// deadlock here, and one that mixed tags or reordered messages would deliver the wrong bytes.
TEST_P(PointToPoint, RingExchangeDeliversEveryMessageByPeerTagAndOrder) {
  if (size() == 1) GTEST_SKIP() << "a single rank has no peer";
  for (DType dtype : {DType::f32, DType::bf16, DType::i64, DType::u8}) {
    for (std::size_t count : {0U, 1U, 1023U, 65537U}) {
      const auto message = [&](int from, std::uint32_t tag, int nth) {
        return make_values(dtype, count,
                           (static_cast<std::uint64_t>(from) << 40) ^ (std::uint64_t{tag} << 4) ^
                               static_cast<std::uint64_t>(nth));
      };
      std::vector<std::vector<Bytes>> sent(static_cast<std::size_t>(size()));
      std::vector<std::vector<Bytes>> received(static_cast<std::size_t>(size()));
      std::vector<std::shared_ptr<Work>> works;
      for (int r = 0; r < size(); ++r) {
        const int right = (r + 1) % size();
        const int left = (r + size() - 1) % size();
        auto& out = sent[static_cast<std::size_t>(r)];
        auto& in = received[static_cast<std::size_t>(r)];
        for (std::uint32_t tag : kTags) {
          for (int nth = 0; nth < 2; ++nth) out.push_back(message(r, tag, nth));
        }
        in.assign(out.size(), Bytes(count * dtype_size(dtype)));
        for (std::size_t m = 0; m < out.size(); ++m) {
          works.push_back(world_->rank(r).send(view(out[m], dtype), right, kTags[m / 2]));
        }
        // Receive tags in reverse order: matching is by tag, not by arrival.
        for (std::size_t m = in.size(); m-- > 0;) {
          const std::size_t slot = (m / 2) * 2 + (1 - m % 2);  // same tag, first message first
          works.push_back(world_->rank(r).recv(view(in[slot], dtype), left, kTags[slot / 2]));
        }
      }
      wait_all(works);
      for (int r = 0; r < size(); ++r) {
        const int left = (r + size() - 1) % size();
        for (std::size_t m = 0; m < received[static_cast<std::size_t>(r)].size(); ++m) {
          const Bytes expected = message(left, kTags[m / 2], static_cast<int>(m % 2));
          ASSERT_EQ(first_difference(received[static_cast<std::size_t>(r)][m], expected, dtype), "")
              << "rank " << r << " message " << m << " " << count << " x " << dtype_name(dtype);
        }
      }
    }
  }
}

TEST_P(PointToPoint, SendToItselfOrOutsideTheGroupIsRefusedAtIssue) {
  float x = 0;
  BufferView one{&x, 1, DType::f32, Device::cpu()};
  EXPECT_THROW((void)world_->rank(0).send(one, 0, 1), InvalidArgument);
  EXPECT_THROW((void)world_->rank(0).recv(one, size(), 1), InvalidArgument);
}

TEST_P(PointToPoint, NoRankLeavesABarrierBeforeEveryRankEnteredIt) {
  std::atomic<int> entered{0};
  std::vector<int> seen(static_cast<std::size_t>(size()));
  std::vector<testing::BlockedCall> waits(static_cast<std::size_t>(size()));
  const auto errors = run_on_ranks(size(), [&](int r) {
    // Rank r enters once rank r - 1 waits in the barrier: the early ones must still be held.
    if (r > 0) {
      EXPECT_TRUE(waits[static_cast<std::size_t>(r) - 1].wait_until_blocked())
          << "rank " << r - 1 << " left the barrier before rank " << r << " entered it";
    }
    entered.fetch_add(1);
    auto& wait = waits[static_cast<std::size_t>(r)];
    auto barrier = world_->rank(r).barrier();
    wait.entering();
    barrier->wait(kTimeout);
    wait.returned();
    seen[static_cast<std::size_t>(r)] = entered.load();
  });
  for (int r = 0; r < size(); ++r) {
    EXPECT_EQ(errors[static_cast<std::size_t>(r)], nullptr) << "rank " << r;
    EXPECT_EQ(seen[static_cast<std::size_t>(r)], size()) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, PointToPoint, ::testing::ValuesIn(every_transport_and_size()),
                         param_name);
// Again with channel slots and segments of a few hundred bytes: each message above spans many.
INSTANTIATE_TEST_SUITE_P(SmallChunks, PointToPoint,
                         ::testing::ValuesIn(every_small_chunk_setting_and_size()), param_name);

}  // namespace
}  // namespace tessera::conformance
