// Per-parameter checkpoints: any slice of a parameter is assembled from whatever blobs cover it
// (tensor-parallel column slices, flat shards that cut rows, format-1 flat checkpoints), and
// gaps, overlaps and foreign parameters are refused.
#include "tessera/strategy_kit/param_checkpoint.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <sstream>

#include "checkpoint_test_support.hpp"

namespace tessera {
namespace {

using testing::MemoryCheckpoint;

// Element g of a parameter's values (slot 0) or of optimizer slot s (s + 1).
float value_at(std::size_t g, std::size_t which) {
  return static_cast<float>(g) + 1000.0F * static_cast<float>(which);
}

// The box "dim restricted to [begin, end)" of a parameter, elements [first, last), found by
// walking every multi-index: the slow, obvious reference the reader is checked against.
std::vector<float> naive(const Shape& shape, std::size_t dim, std::size_t begin, std::size_t end,
                         std::size_t first, std::size_t last, std::size_t which) {
  std::size_t total = 1;
  for (auto extent : shape) total *= extent;
  std::vector<float> box;
  for (std::size_t g = 0; g < total; ++g) {
    std::size_t rest = g;
    std::vector<std::size_t> index(shape.size());
    for (std::size_t d = shape.size(); d-- > 0;) {
      index[d] = rest % shape[d];
      rest /= shape[d];
    }
    if (index[dim] >= begin && index[dim] < end) box.push_back(value_at(g, which));
  }
  last = std::min(last, box.size());
  return {box.begin() + static_cast<std::ptrdiff_t>(first),
          box.begin() + static_cast<std::ptrdiff_t>(last)};
}

struct Piece {
  std::size_t dim, begin, end, first, last;
};

// A checkpoint of `param` (values and `slots` optimizer slots) cut into `pieces`.
std::unique_ptr<MemoryCheckpoint> written(const ParamId& param, std::size_t slots,
                                          const std::vector<Piece>& pieces) {
  auto c = std::make_unique<MemoryCheckpoint>(1);
  save_param_index(*c, {"test", slots, {param}});
  for (std::size_t which = 0; which <= slots; ++which) {
    for (const auto& p : pieces) {
      const StateSlice slice{param.layer,
                             param.name,
                             param.shape,
                             which == 0 ? StateKind::parameter : StateKind::optimizer_state,
                             which == 0 ? 0 : which - 1,
                             p.dim,
                             p.begin,
                             p.end,
                             p.first,
                             p.last};
      c->put_slice(slice, naive(param.shape, p.dim, p.begin, p.end, p.first, p.last, which));
    }
  }
  return c;
}

void expect_reads_like_naive(const SliceReader& reader, const ParamId& param, std::size_t slots) {
  for (std::size_t which = 0; which <= slots; ++which) {
    const auto kind = which == 0 ? StateKind::parameter : StateKind::optimizer_state;
    for (std::size_t dim = 0; dim < param.shape.size(); ++dim) {
      for (std::size_t b = 0; b < param.shape[dim]; ++b) {
        for (std::size_t e = b + 1; e <= param.shape[dim]; ++e) {
          const auto box = naive(param.shape, dim, b, e, 0, SIZE_MAX, which);
          EXPECT_EQ(reader.read_slice(param, kind, which ? which - 1 : 0, dim, b, e), box)
              << "dim " << dim << " [" << b << ", " << e << ") of " << which;
          // And a stretch of it that starts and ends inside rows.
          if (box.size() > 3) {
            EXPECT_EQ(
                reader.read_slice(param, kind, which ? which - 1 : 0, dim, b, e, 1, box.size() - 1),
                naive(param.shape, dim, b, e, 1, box.size() - 1, which));
          }
        }
      }
    }
  }
}

const ParamId kWeight{1, "fc1.weight", {4, 6}};

TEST(SliceReader, ColumnSlicesOfATensorParallelWriterLoadAsAnySliceOrFlatRange) {
  // A row-parallel layer's two ranks each hold half the columns: dim 1, [0, 3) and [3, 6).
  const auto c = written(kWeight, 1, {{1, 0, 3, 0, 12}, {1, 3, 6, 0, 12}});
  const SliceReader reader(*c);
  reader.verify();
  expect_reads_like_naive(reader, kWeight, 1);
}

TEST(SliceReader, FlatShardsThatCutRowsLoadAsColumnSlices) {
  // A data-parallel shard boundary at elements 5 and 17, both inside a row of 6.
  const auto c = written(kWeight, 2, {{0, 0, 4, 0, 5}, {0, 0, 4, 5, 17}, {0, 0, 4, 17, 24}});
  const SliceReader reader(*c);
  reader.verify();
  expect_reads_like_naive(reader, kWeight, 2);
}

TEST(SliceReader, EveryBoxOfAThreeDimensionalParameterMatchesNaiveIndexing) {
  const ParamId cube{0, "cube", {3, 4, 5}};
  // Written sliced along each dimension in turn, each box cut again inside its rows.
  for (std::size_t dim = 0; dim < 3; ++dim) {
    const std::size_t extent = cube.shape[dim];
    const std::size_t box0 = 60 / extent;  // elements of the box [0, 1)
    const std::size_t box1 = 60 - box0;
    const auto c = written(cube, 1,
                           {{dim, 0, 1, 0, box0 / 2},
                            {dim, 0, 1, box0 / 2, box0},
                            {dim, 1, extent, 0, 7},
                            {dim, 1, extent, 7, box1}});
    const SliceReader reader(*c);
    reader.verify();
    expect_reads_like_naive(reader, cube, 1);
  }
}

std::string refusal(const std::function<void()>& action) {
  try {
    action();
    ADD_FAILURE() << "no CheckpointError";
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return {};
}

TEST(SliceReader, AMissingPieceIsRefusedNamingTheFirstElementNoBlobHolds) {
  const auto c = written(kWeight, 1, {{0, 0, 4, 0, 5}, {0, 0, 4, 17, 24}});
  const SliceReader reader(*c);
  auto message =
      refusal([&] { (void)reader.read_slice(kWeight, StateKind::parameter, 0, 0, 0, 4); });
  EXPECT_NE(
      message.find("no blob for element 5 of dimension 0 [0, 4) of 1.fc1.weight [4x6] values"),
      std::string::npos)
      << message;
  // A slice the present pieces do cover still loads.
  EXPECT_EQ(reader.read_slice(kWeight, StateKind::parameter, 0, 0, 3, 4),
            naive(kWeight.shape, 0, 3, 4, 0, SIZE_MAX, 0));
  message = refusal([&] { reader.verify(); });
  EXPECT_NE(message.find("hold 12 of the 24 elements of 1.fc1.weight [4x6] values"),
            std::string::npos)
      << message;
}

TEST(SliceReader, OverlappingPiecesAreRefusedNamingBothBlobs) {
  const auto c = written(kWeight, 0, {{0, 0, 4, 0, 10}, {1, 2, 4, 0, 8}, {0, 0, 4, 10, 24}});
  const SliceReader reader(*c);
  const auto message =
      refusal([&] { (void)reader.read_slice(kWeight, StateKind::parameter, 0, 0, 0, 4); });
  EXPECT_NE(message.find("'1.fc1.weight/parameter/d0[0:4]/e[0:10]' and "
                         "'1.fc1.weight/parameter/d1[2:4]/e[0:8]' both hold element 2"),
            std::string::npos)
      << message;
  EXPECT_NE(refusal([&] { reader.verify(); }).find("overlap"), std::string::npos);
}

TEST(SliceReader, ASliceOfAParameterTheIndexDoesNotListIsRefused) {
  auto c = written(kWeight, 0, {{0, 0, 4, 0, 24}});
  c->put_slice({2, "stray", {3}, StateKind::parameter, 0, 0, 0, 3, 0, 3}, std::vector<float>(3));
  const auto message = refusal([&] { const SliceReader reader(*c); });
  EXPECT_NE(message.find("is a slice of 2.stray [3], which 'parameters' does not list"),
            std::string::npos)
      << message;
}

TEST(SliceReader, AnotherModelOrOptimizerIsRefused) {
  const auto c = written(kWeight, 1, {{0, 0, 4, 0, 24}});
  const SliceReader reader(*c);
  EXPECT_NO_THROW(reader.check_params({kWeight}));
  EXPECT_NO_THROW(reader.check_state_slots(1));
  auto message = refusal([&] { reader.check_params({{1, "fc1.weight", {6, 4}}}); });
  EXPECT_NE(message.find("another model: its parameter 0 is 1.fc1.weight [4x6], the model's "
                         "1.fc1.weight [6x4]"),
            std::string::npos)
      << message;
  message = refusal([&] { reader.check_state_slots(2); });
  EXPECT_NE(message.find("1 slots per parameter, the configured optimizer 2"), std::string::npos)
      << message;
}

// The index records each parameter's weight-decay flag; an index written before it did (every
// format-2 checkpoint until then) reads with no flags, and one that records some parameters'
// flags but not all is refused.
TEST(SliceReader, TheIndexRecordsWeightDecayFlagsAndOlderIndexesReadWithout) {
  const ParamId bias{1, "fc1.bias", {4}};
  const auto with_flags = [&](std::vector<bool> flags) {
    auto c = std::make_unique<MemoryCheckpoint>(1);
    save_param_index(*c, {"test", 0, {kWeight, bias}, std::move(flags)});
    c->put_slice(
        {kWeight.layer, kWeight.name, kWeight.shape, StateKind::parameter, 0, 0, 0, 4, 0, 24},
        std::vector<float>(24));
    c->put_slice({bias.layer, bias.name, bias.shape, StateKind::parameter, 0, 0, 0, 4, 0, 4},
                 std::vector<float>(4));
    return c;
  };
  EXPECT_EQ(SliceReader(*with_flags({true, false})).index().weight_decay,
            (std::vector<bool>{true, false}));
  EXPECT_TRUE(SliceReader(*with_flags({})).index().weight_decay.empty());
  EXPECT_THROW(with_flags({true}), InvalidArgument);

  auto c = with_flags({true, false});
  const auto bytes = c->get("parameters");
  std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  // The bias's entry loses its flag (the key renamed: the JSON stays well-formed).
  text.replace(text.rfind("\"weight_decay\""), std::string("\"weight_decay\"").size(),
               "\"unrelated\"");
  c->put("parameters", std::as_bytes(std::span<const char>(text.data(), text.size())));
  const auto message = refusal([&] { const SliceReader reader(*c); });
  EXPECT_NE(message.find("\"weight_decay\" is given for some parameters but not all"),
            std::string::npos)
      << message;
}

// Checkpoints of format 1 written by round one's tessera (tests/unit/data/checkpoint_v1,
// written_by.ini): an MLP 6-5-3 with Adam after two steps.
std::filesystem::path format_one(const std::string& run) {
  const auto root = std::filesystem::path(TESSERA_TEST_DATA_DIR) / "checkpoint_v1" / run;
  return root / "step-000000000002";
}

// The flat vectors a format-1 checkpoint holds, assembled the way round one wrote them: each
// shard's blob copied to its [begin, end) of flat/shards.
std::vector<float> flat_of(const CheckpointReader& reader, const std::string& kind,
                           std::size_t total, std::size_t slot, std::size_t slots) {
  const auto text = reader.get("flat/shards");
  std::istringstream index(std::string(reinterpret_cast<const char*>(text.data()), text.size()));
  std::string word;
  std::size_t count = 0;
  std::size_t ignored = 0;
  index >> word >> count >> word >> ignored;
  std::vector<float> flat(total);
  for (std::size_t k = 0; k < count; ++k) {
    std::size_t id = 0, begin = 0, end = 0;
    index >> id >> begin >> end;
    const auto bytes = reader.get("flat/" + kind + "/" + std::to_string(k));
    std::vector<float> values(bytes.size() / sizeof(float));
    if (!bytes.empty()) std::memcpy(values.data(), bytes.data(), bytes.size());  // an empty shard
    const std::size_t length = end - begin;
    for (std::size_t j = begin; j < std::min(end, total); ++j) {
      flat[j] = values[(kind == "params" ? 0 : slot * length) + j - begin];
    }
  }
  (void)slots;
  return flat;
}

TEST(SliceReader, FormatOneCheckpointsOfEveryStrategyReadAsSlicesOfNamedParameters) {
  const std::vector<ParamId> mlp = {{0, "fc0.weight", {5, 6}},
                                    {0, "fc0.bias", {5}},
                                    {2, "fc1.weight", {3, 5}},
                                    {2, "fc1.bias", {3}}};
  for (const std::string run : {"ddp-n1", "zero2-n2", "zero3-n3"}) {
    const FileCheckpointReader file(format_one(run));
    EXPECT_EQ(file.manifest().format_version, 1);
    const SliceReader reader(file);
    EXPECT_EQ(reader.format_version(), 1);
    reader.verify();
    reader.check_params(mlp);
    reader.check_state_slots(2);
    for (std::size_t which = 0; which <= 2; ++which) {
      const auto flat = flat_of(file, which == 0 ? "params" : "optimizer_state", 53,
                                which == 0 ? 0 : which - 1, 2);
      std::vector<float> assembled;
      for (const auto& p : mlp) {
        const auto values =
            reader.read_slice(p, which == 0 ? StateKind::parameter : StateKind::optimizer_state,
                              which == 0 ? 0 : which - 1, 0, 0, p.shape[0]);
        assembled.insert(assembled.end(), values.begin(), values.end());
      }
      EXPECT_EQ(assembled, flat) << run << " " << which;
    }
    // A column slice of a format-1 checkpoint too.
    const auto column = reader.read_slice(mlp[0], StateKind::parameter, 0, 1, 2, 4);
    const auto whole = reader.read_slice(mlp[0], StateKind::parameter, 0, 0, 0, 5);
    for (std::size_t r = 0; r < 5; ++r) {
      EXPECT_EQ(column[2 * r], whole[6 * r + 2]);
      EXPECT_EQ(column[2 * r + 1], whole[6 * r + 3]);
    }
  }
  EXPECT_EQ(SliceReader(FileCheckpointReader(format_one("zero2-n2"))).index().strategy, "zero2");
}

}  // namespace
}  // namespace tessera
