// Collectives whose buffers span several staging chunks, with element counts one below, at and
// one above each of the first three chunk edges, under every transport's SmallChunks settings
// (transports_under_test.hpp). A transport that mishandles the chunk after the first, or a last
// chunk shorter than the others, gives wrong bytes here, where the suite's other sizes (under
// the default 128 KiB rounds) all fit in one chunk.

#include <gtest/gtest.h>

#include <set>

#include "reference.hpp"
#include "world.hpp"

namespace tessera::conformance {
namespace {

class CollectivesAcrossChunkEdges : public ::testing::TestWithParam<WorldParam> {
 protected:
  void SetUp() override {
    if (const auto why = unavailable(GetParam().transport, size())) GTEST_SKIP() << *why;
    world_ = std::make_unique<World>(GetParam().transport, size(), kTimeout, GetParam().options());
  }
  [[nodiscard]] int size() const { return GetParam().size; }

  // Element counts around the chunk edges of `dtype`: multiples of one round's staging
  // (all_reduce, all_gather, broadcast) and of one rank's part of it (reduce_scatter's chunk
  // of a block, a message segment), each minus one, exact and plus one.
  [[nodiscard]] std::vector<std::size_t> counts_around_edges(DType dtype) const {
    const std::size_t round = GetParam().chunks->round_bytes(size()) / dtype_size(dtype);
    const std::size_t part = round / static_cast<std::size_t>(size());
    std::set<std::size_t> counts;
    for (std::size_t unit : {part, round}) {
      for (std::size_t edges = 1; edges <= 3; ++edges) {
        for (std::size_t count : {edges * unit - 1, edges * unit, edges * unit + 1})
          counts.insert(count);
      }
    }
    return {counts.begin(), counts.end()};
  }

  // One input per rank, salted by what the test does with it.
  [[nodiscard]] std::vector<Bytes> inputs(DType dtype, std::size_t count, int salt) const {
    std::vector<Bytes> per_rank;
    for (int r = 0; r < size(); ++r) {
      per_rank.push_back(make_values(dtype, count,
                                     (static_cast<std::uint64_t>(r) << 40) ^ (count << 8) ^
                                         (static_cast<std::uint64_t>(dtype) << 4) ^
                                         static_cast<std::uint64_t>(salt)));
    }
    return per_rank;
  }

  std::unique_ptr<World> world_;
};

const DType kElementSizes[] = {DType::u8, DType::bf16, DType::f32, DType::f64};

TEST_P(CollectivesAcrossChunkEdges, AllReduceSumEqualsTheReferenceOnEveryRank) {
  for (DType dtype : kElementSizes) {
    for (std::size_t count : counts_around_edges(dtype)) {
      std::vector<Bytes> data = inputs(dtype, count, 1);
      const Bytes expected = reference_reduce(data, dtype, ReduceOp::sum, 0, count);
      std::vector<std::shared_ptr<Work>> works;
      for (int r = 0; r < size(); ++r) {
        works.push_back(world_->rank(r).all_reduce(view(data[static_cast<std::size_t>(r)], dtype),
                                                   ReduceOp::sum));
      }
      wait_all(works);
      for (int r = 0; r < size(); ++r) {
        ASSERT_EQ(first_difference(data[static_cast<std::size_t>(r)], expected, dtype), "")
            << "rank " << r << " all_reduce of " << count << " x " << dtype_name(dtype);
      }
    }
  }
}

TEST_P(CollectivesAcrossChunkEdges, ReduceScatterSumGivesEachRankTheReferenceOfItsWholeBlock) {
  for (DType dtype : kElementSizes) {
    for (std::size_t block : counts_around_edges(dtype)) {
      const std::vector<Bytes> in = inputs(dtype, block * static_cast<std::size_t>(size()), 2);
      std::vector<Bytes> out(static_cast<std::size_t>(size()), Bytes(block * dtype_size(dtype)));
      std::vector<Bytes> in_copies = in;
      std::vector<std::shared_ptr<Work>> works;
      for (int r = 0; r < size(); ++r) {
        const auto i = static_cast<std::size_t>(r);
        works.push_back(world_->rank(r).reduce_scatter(view(in_copies[i], dtype),
                                                       view(out[i], dtype), ReduceOp::sum));
      }
      wait_all(works);
      for (int r = 0; r < size(); ++r) {
        const Bytes expected =
            reference_reduce(in, dtype, ReduceOp::sum, static_cast<std::size_t>(r) * block, block);
        ASSERT_EQ(first_difference(out[static_cast<std::size_t>(r)], expected, dtype), "")
            << "rank " << r << " reduce_scatter block of " << block << " x " << dtype_name(dtype);
      }
    }
  }
}

TEST_P(CollectivesAcrossChunkEdges, AllGatherGivesEveryRankEveryWholeBlock) {
  for (DType dtype : kElementSizes) {
    for (std::size_t block : counts_around_edges(dtype)) {
      std::vector<Bytes> in = inputs(dtype, block, 3);
      Bytes expected;
      for (const auto& mine : in) expected.insert(expected.end(), mine.begin(), mine.end());
      std::vector<Bytes> out(static_cast<std::size_t>(size()), Bytes(expected.size()));
      std::vector<std::shared_ptr<Work>> works;
      for (int r = 0; r < size(); ++r) {
        const auto i = static_cast<std::size_t>(r);
        works.push_back(world_->rank(r).all_gather(view(in[i], dtype), view(out[i], dtype)));
      }
      wait_all(works);
      for (int r = 0; r < size(); ++r) {
        ASSERT_EQ(first_difference(out[static_cast<std::size_t>(r)], expected, dtype), "")
            << "rank " << r << " all_gather block of " << block << " x " << dtype_name(dtype);
      }
    }
  }
}

TEST_P(CollectivesAcrossChunkEdges, BroadcastFromTheLastRankCopiesAllOfIt) {
  const int root = size() - 1;
  for (DType dtype : kElementSizes) {
    for (std::size_t count : counts_around_edges(dtype)) {
      std::vector<Bytes> data = inputs(dtype, count, 4);
      const Bytes expected = data[static_cast<std::size_t>(root)];
      std::vector<std::shared_ptr<Work>> works;
      for (int r = 0; r < size(); ++r) {
        works.push_back(
            world_->rank(r).broadcast(view(data[static_cast<std::size_t>(r)], dtype), root));
      }
      wait_all(works);
      for (int r = 0; r < size(); ++r) {
        ASSERT_EQ(first_difference(data[static_cast<std::size_t>(r)], expected, dtype), "")
            << "rank " << r << " broadcast of " << count << " x " << dtype_name(dtype);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SmallChunks, CollectivesAcrossChunkEdges,
                         ::testing::ValuesIn(every_small_chunk_setting_and_size()), param_name);

}  // namespace
}  // namespace tessera::conformance
