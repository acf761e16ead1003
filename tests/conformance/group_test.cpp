// split and abort.

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "reference.hpp"
#include "tessera/base/error.hpp"
#include "world.hpp"

namespace tessera::conformance {
namespace {

class Groups : public ::testing::TestWithParam<WorldParam> {
 protected:
  void SetUp() override {
    if (const auto why = unavailable(GetParam().transport, GetParam().size)) GTEST_SKIP() << *why;
    world_ = std::make_unique<World>(GetParam().transport, GetParam().size);
  }
  [[nodiscard]] int size() const { return GetParam().size; }
  std::unique_ptr<World> world_;
};

void rethrow_failures(const std::vector<std::exception_ptr>& errors) {
  for (std::size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << ": " << e.what();
    }
  }
}

// Even and odd ranks form two groups ordered by descending old rank (key = -rank); each then
// all-reduces within itself, and the result is the reference over exactly its members.
TEST_P(Groups, SplitByColorOrdersByKeyAndEachSubgroupReducesOnlyItsMembers) {
  const std::size_t count = 1023;
  std::vector<Bytes> inputs;
  for (int r = 0; r < size(); ++r)
    inputs.push_back(make_values(DType::f32, count, 900 + static_cast<std::uint64_t>(r)));
  std::vector<Bytes> data = inputs;
  std::vector<int> new_rank(static_cast<std::size_t>(size()), -1);
  std::vector<int> new_size(static_cast<std::size_t>(size()), -1);

  rethrow_failures(run_on_ranks(size(), [&](int r) {
    const auto i = static_cast<std::size_t>(r);
    auto child = world_->rank(r).split(r % 2, -r);
    ASSERT_NE(child, nullptr);
    new_rank[i] = child->rank();
    new_size[i] = child->size();
    child->all_reduce(view(data[i], DType::f32), ReduceOp::sum)->wait(kTimeout);
  }));

  for (int r = 0; r < size(); ++r) {
    const auto i = static_cast<std::size_t>(r);
    std::vector<Bytes> members;  // in the new rank order: descending old rank
    for (int peer = size() - 1; peer >= 0; --peer) {
      if (peer % 2 == r % 2) members.push_back(inputs[static_cast<std::size_t>(peer)]);
    }
    const int expected_rank = static_cast<int>((size() - 1 - r) / 2);
    EXPECT_EQ(new_size[i], static_cast<int>(members.size())) << "rank " << r;
    EXPECT_EQ(new_rank[i], expected_rank) << "rank " << r;
    const Bytes expected = reference_reduce(members, DType::f32, ReduceOp::sum, 0, count);
    EXPECT_EQ(first_difference(data[i], expected, DType::f32), "") << "rank " << r;
  }
}

// A negative color opts out with nullptr; the others still form their group, which keeps
// working after the parent communicators are gone.
TEST_P(Groups, NegativeColorOptsOutAndTheChildOutlivesItsParent) {
  std::vector<std::shared_ptr<Communicator>> children(static_cast<std::size_t>(size()));
  rethrow_failures(run_on_ranks(size(), [&](int r) {
    children[static_cast<std::size_t>(r)] = world_->rank(r).split(r == 0 ? -1 : 5, 0);
  }));
  EXPECT_EQ(children[0], nullptr);
  world_.reset();
  if (size() == 1) return;
  std::vector<std::int32_t> values(static_cast<std::size_t>(size()));
  std::vector<std::shared_ptr<Work>> works;
  for (int r = 1; r < size(); ++r) {
    auto& child = children[static_cast<std::size_t>(r)];
    ASSERT_NE(child, nullptr);
    EXPECT_EQ(child->size(), size() - 1);
    EXPECT_EQ(child->rank(), r - 1);
    values[static_cast<std::size_t>(r)] = r;
    works.push_back(child->all_reduce(
        {&values[static_cast<std::size_t>(r)], 1, DType::i32, Device::cpu()}, ReduceOp::max));
  }
  wait_all(works);
  for (int r = 1; r < size(); ++r) EXPECT_EQ(values[static_cast<std::size_t>(r)], size() - 1);
}

// One rank issues an all_reduce its peers never join; abort() from another thread must end it
// with a TransportError carrying the reason, long before any timeout, and fail what follows.
TEST_P(Groups, AbortFailsAPendingOperationAndEveryLaterOne) {
  if (size() > 1 && !peers_hear_of_failures(GetParam().transport)) {
    GTEST_SKIP() << GetParam().transport << ": a rank's abort does not reach its peers at once; "
                 << "they fail at their timeout";
  }
  float x = 1.0F;
  BufferView one{&x, 1, DType::f32, Device::cpu()};
  const int last = size() - 1;
  if (size() == 1) {
    world_->rank(0).abort("stop the world");
  }
  auto pending = world_->rank(0).all_reduce(one, ReduceOp::sum);
  const auto start = std::chrono::steady_clock::now();
  if (size() > 1) world_->rank(last).abort("stop the world");
  try {
    pending->wait(kTimeout);
    FAIL() << "the pending all_reduce completed";
  } catch (const TransportError& e) {
    EXPECT_NE(std::string(e.what()).find("stop the world"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_TRUE(pending->test());
  EXPECT_NE(pending->exception(), nullptr);
  EXPECT_THROW(world_->rank(last).barrier()->wait(kTimeout), TransportError);
  world_->rank(0).abort("again");  // idempotent
}

INSTANTIATE_TEST_SUITE_P(Transports, Groups, ::testing::ValuesIn(every_transport_and_size()),
                         param_name);

}  // namespace
}  // namespace tessera::conformance
