// Strategy::reconfigure: a world of 3 ranks trains, shrinks to 2 between steps, and every
// strategy continues from state exchanged in memory exactly as a fresh 2-rank run continues
// from a checkpoint of the same state on disk.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "ddp_strategy.hpp"
#include "ddp_test_support.hpp"
#include "memory_store.hpp"
#include "tessera/runtime/checkpoint.hpp"
#include "tessera/strategy_kit/memory_state.hpp"
#include "zero3_strategy.hpp"
#include "zero_strategy.hpp"
#include "zero_test_support.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::kTestTimeout;

enum class Kind { ddp, zero1, zero2, zero3 };

std::string name_of(Kind kind) {
  switch (kind) {
    case Kind::ddp: return "ddp";
    case Kind::zero1: return "zero1";
    case Kind::zero2: return "zero2";
    case Kind::zero3: return "zero3";
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
  zero::ZeroConfig config;
  config.stage = kind == Kind::zero1 ? zero::ZeroStage::one : zero::ZeroStage::two;
  config.first_bucket_bytes = 16384;  // several buckets, so pieces move between ranks
  config.bucket_cap_bytes = 32768;
  return std::make_unique<zero::ZeroStrategy>(config);
}

// Collective for zero3 (it gathers the shards).
std::vector<float> full_parameters(Strategy& strategy, Kind kind, std::size_t total) {
  if (kind == Kind::ddp) {
    const auto p = dynamic_cast<ddp::DdpStrategy&>(strategy).parameters();
    return {p.begin(), p.end()};
  }
  if (kind == Kind::zero3) return dynamic_cast<zero3::Zero3Strategy&>(strategy).gather_parameters();
  const auto p = dynamic_cast<zero::ZeroStrategy&>(strategy).parameters().first(total);
  return {p.begin(), p.end()};
}

constexpr std::size_t kBatch = 8;  // per rank
constexpr int kStepsBefore = 3;

// Step `step` (from 1) of rank `rank` in a world of `world`: consecutive rows, a fresh block of
// the training split per step.
StepStats train(Strategy& strategy, std::int64_t step, int rank, int world) {
  static const auto data = testing::zero_test_data();
  const std::size_t global = kBatch * static_cast<std::size_t>(world);
  const auto first =
      (static_cast<std::size_t>(step) * 32 + static_cast<std::size_t>(rank) * kBatch);
  const auto rows = testing::consecutive(first % 2000, kBatch);
  return strategy.train_step(data->gather(Split::train, rows), StepInfo{step, 1e-3F, global});
}

// The local transport, which joins any number of worlds of threads, one store per world.
std::shared_ptr<Transport> local_transport() {
  const auto& registry = testing::test_registry();
  auto defaults = registry.default_options(PluginKind::transport, "local");
  auto values = defaults.values();
  values["timeout"] = "30s";
  return registry.create<Transport>("local", Options(defaults.section(), defaults.specs(), values));
}

void run_threads(int n, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

class Reconfigure : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tessera-reconfigure-test-" + std::to_string(::getpid()) + "-" + name_of(GetParam()));
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_P(Reconfigure, ThreeRanksShrunkToTwoContinueAsATwoRankRunLoadedFromTheSameState) {
  const Kind kind = GetParam();
  const auto model = testing::zero_test_mlp();
  const std::size_t total = FlatLayout::of(*model).total;
  const auto transport = local_transport();
  const auto old_store = memory::make_memory_store();
  const auto new_store = memory::make_memory_store();

  // 3 ranks train, save the state into memory and to disk, then ranks 0 and 1 go on as a world
  // of 2 and rank 2 leaves.
  std::vector<std::vector<float>> reconfigured(2);
  fs::path written;
  run_threads(3, [&](int rank) {
    auto old_world = transport->connect(old_store, rank, 3, kTestTimeout);
    auto strategy = make(kind);
    strategy->setup({old_world, model, testing::zero_test_adam(), 11});
    for (int s = 1; s <= kStepsBefore; ++s) train(*strategy, s, rank, 3);

    const auto state = gather_state_in_memory(*strategy, *old_world);
    EXPECT_EQ(state->saved_world_size(), 3);
    const auto folder = write_checkpoint(
        root_, kStepsBefore, {}, *old_world, [&](CheckpointWriter& w) { strategy->save(w); },
        {{}, 1}, kTestTimeout);
    if (rank == 0) written = folder;
    if (rank == 2) return;

    std::shared_ptr<Communicator> new_world = transport->connect(new_store, rank, 2, kTestTimeout);
    strategy->reconfigure(new_world, *state);
    // The old world's communicator is released: only this test still holds it.
    EXPECT_EQ(old_world.use_count(), 1) << "rank " << rank;
    const auto placement = strategy->data_parallel_placement();
    EXPECT_EQ(placement.rank, rank);
    EXPECT_EQ(placement.size, 2);
    train(*strategy, kStepsBefore + 1, rank, 2);
    reconfigured[static_cast<std::size_t>(rank)] = full_parameters(*strategy, kind, total);
  });

  // The reference: a fresh world of 2 loads the checkpoint and takes the same step.
  std::vector<std::vector<float>> loaded(2);
  const auto ref_store = memory::make_memory_store();
  run_threads(2, [&](int rank) {
    auto world = transport->connect(ref_store, rank, 2, kTestTimeout);
    auto strategy = make(kind);
    strategy->setup({world, model, testing::zero_test_adam(), 11});
    strategy->load(FileCheckpointReader(written));
    train(*strategy, kStepsBefore + 1, rank, 2);
    loaded[static_cast<std::size_t>(rank)] = full_parameters(*strategy, kind, total);
  });

  for (std::size_t r = 0; r < 2; ++r) {
    ASSERT_EQ(reconfigured[r].size(), total);
    ASSERT_EQ(loaded[r].size(), total);
    EXPECT_EQ(0, std::memcmp(reconfigured[r].data(), loaded[r].data(), total * sizeof(float)))
        << name_of(kind) << ": rank " << r << " after the world change differs from the loaded run";
  }
}

INSTANTIATE_TEST_SUITE_P(EveryDataParallelStrategy, Reconfigure,
                         ::testing::Values(Kind::ddp, Kind::zero1, Kind::zero2, Kind::zero3),
                         [](const auto& param) { return name_of(param.param); });

// Every rank's save() into one place (blobs by name, slices by blob name), for comparison with
// what the exchange hands each rank.
using SliceMap = std::map<std::string, std::vector<float>>;

class CollectedState final : public CheckpointWriter {
 public:
  void put(const std::string& name, std::span<const std::byte> bytes) override {
    const std::lock_guard lock(mutex_);
    blobs_[name].assign(bytes.begin(), bytes.end());
  }
  void put_slice(const StateSlice& slice, std::span<const float> values) override {
    const std::lock_guard lock(mutex_);
    slices_[slice_blob_name(slice)].assign(values.begin(), values.end());
  }
  std::map<std::string, std::vector<std::byte>> blobs() const {
    const std::lock_guard lock(mutex_);
    return blobs_;
  }
  SliceMap slices() const {
    const std::lock_guard lock(mutex_);
    return slices_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::vector<std::byte>> blobs_;
  SliceMap slices_;
};

SliceMap slices_of(const MemoryCheckpoint& state) {
  SliceMap out;
  const auto described = state.slices();
  for (std::size_t i = 0; i < described.size(); ++i) {
    out[slice_blob_name(described[i])] = state.slice_values(i);
  }
  return out;
}

TEST(MemoryState, EveryRankReceivesEveryRanksBlobsAndSlices) {
  const auto model = testing::zero_test_mlp();
  CollectedState saved;
  std::vector<std::map<std::string, std::vector<std::byte>>> received(3);
  std::vector<SliceMap> received_slices(3);
  testing::run_ranks(3, [&](std::shared_ptr<Communicator> world) {
    zero::ZeroConfig config;
    config.first_bucket_bytes = 16384;
    config.bucket_cap_bytes = 32768;
    zero::ZeroStrategy strategy(config);
    strategy.setup({world, model, testing::zero_test_adam(), 11});
    train(strategy, 1, world->rank(), 3);  // optimizer state other than zeros
    strategy.save(saved);
    const auto state = gather_state_in_memory(strategy, *world);
    const auto r = static_cast<std::size_t>(world->rank());
    received[r] = state->blobs();
    received_slices[r] = slices_of(*state);
  });
  const auto all = saved.blobs();
  const auto all_slices = saved.slices();
  EXPECT_GT(all.size() + all_slices.size(), 6U);  // each rank's pieces and rank 0's manifest
  EXPECT_FALSE(all_slices.empty());               // zero saves per-parameter slices
  for (std::size_t r = 0; r < received.size(); ++r) {
    EXPECT_EQ(received[r], all) << "rank " << r;
    EXPECT_EQ(received_slices[r], all_slices) << "rank " << r;
  }
}

TEST(MemoryState, ABlobNameWrittenTwiceOrMissingIsACheckpointError) {
  MemoryCheckpoint state(1);
  const std::byte one[1] = {std::byte{1}};
  state.put("a", one);
  EXPECT_THROW(state.put("a", one), CheckpointError);
  EXPECT_THROW((void)state.get("b"), CheckpointError);
  EXPECT_EQ(state.get("a"), std::vector<std::byte>{std::byte{1}});
}

// A slice of rows [begin, end) of a 4x3 parameter, whole rows, values from `seed`.
StateSlice rows_of(const std::string& param, std::size_t begin, std::size_t end,
                   StateKind kind = StateKind::parameter, std::size_t slot = 0) {
  StateSlice slice;
  slice.layer = 2;
  slice.param = param;
  slice.shape = {4, 3};
  slice.kind = kind;
  slice.slot = slot;
  slice.dim = 0;
  slice.begin = begin;
  slice.end = end;
  slice.first = 0;
  slice.last = (end - begin) * 3;
  return slice;
}

std::vector<float> values_for(const StateSlice& slice, float seed) {
  std::vector<float> values(slice.elements());
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = seed + static_cast<float>(i) * 0.5F;
  return values;
}

std::span<const std::byte> text_bytes(const std::string& text) {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

// Two blobs, then three slices, through any writer.
void write_sample(CheckpointWriter& writer, float seed) {
  writer.put("a/manifest", text_bytes("{\"step\": 3}"));
  writer.put("b/empty", {});
  const auto weight = rows_of("weight", 0, 2);
  const auto moment = rows_of("weight", 0, 2, StateKind::optimizer_state, 1);
  const auto bias = rows_of("bias", 1, 4);
  writer.put_slice(weight, values_for(weight, seed));
  writer.put_slice(moment, values_for(moment, seed + 100));
  writer.put_slice(bias, values_for(bias, seed + 200));
}

std::string error_of(const std::function<void()>& act) {
  try {
    act();
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "no CheckpointError";
}

void put_u64_at(std::vector<std::uint8_t>& bytes, std::size_t at, std::uint64_t value) {
  ASSERT_LE(at + sizeof value, bytes.size());
  std::memcpy(bytes.data() + at, &value, sizeof value);
}

TEST(MemoryState, APackedSaveIsThePackOfAMemoryCheckpointAndUnpacksToTheSameState) {
  MemoryCheckpoint held(1);
  write_sample(held, 1);
  std::vector<std::uint8_t> packed;
  PackedCheckpointWriter writer(packed);
  write_sample(writer, 1);
  writer.finish();
  EXPECT_EQ(packed, pack_memory_checkpoint(held));

  MemoryCheckpoint back(1);
  unpack_memory_checkpoint(packed, back);
  EXPECT_EQ(back.blobs(), held.blobs());
  EXPECT_EQ(back.slices(), held.slices());
  EXPECT_EQ(slices_of(back), slices_of(held));
}

TEST(MemoryState, AStrategysPackedSavesUnpackToWhatItSaved) {
  const auto model = testing::zero_test_mlp();
  CollectedState saved;
  std::vector<std::vector<std::uint8_t>> packed(3);
  testing::run_ranks(3, [&](std::shared_ptr<Communicator> world) {
    zero::ZeroConfig config;
    config.first_bucket_bytes = 16384;
    config.bucket_cap_bytes = 32768;
    zero::ZeroStrategy strategy(config);
    strategy.setup({world, model, testing::zero_test_adam(), 11});
    train(strategy, 1, world->rank(), 3);
    strategy.save(saved);
    PackedCheckpointWriter writer(packed[static_cast<std::size_t>(world->rank())]);
    strategy.save(writer);
    writer.finish();
  });
  MemoryCheckpoint all(3);
  for (const auto& bytes : packed) unpack_memory_checkpoint(bytes, all);
  EXPECT_EQ(all.blobs(), saved.blobs());
  EXPECT_EQ(slices_of(all), saved.slices());
  EXPECT_FALSE(saved.slices().empty());
}

TEST(MemoryState, APackedWriterWritesAgainIntoItsBufferInPlaceAndTrimsAShorterPack) {
  std::vector<std::uint8_t> packed;
  {
    PackedCheckpointWriter writer(packed);
    write_sample(writer, 1);
    writer.finish();
  }
  const auto* memory = packed.data();
  const auto length = packed.size();
  {
    PackedCheckpointWriter writer(packed);
    write_sample(writer, 7);
    writer.finish();
  }
  EXPECT_EQ(packed.data(), memory);  // neither grown nor moved: no fresh pages
  EXPECT_EQ(packed.size(), length);
  MemoryCheckpoint expected(1);
  write_sample(expected, 7);
  EXPECT_EQ(packed, pack_memory_checkpoint(expected));

  // A shorter pack into the same buffer leaves nothing of the longer one behind.
  {
    PackedCheckpointWriter writer(packed);
    writer.put("only", text_bytes("x"));
    writer.finish();
  }
  EXPECT_EQ(packed.data(), memory);
  MemoryCheckpoint back(1);
  unpack_memory_checkpoint(packed, back);
  EXPECT_EQ(back.blobs().size(), 1U);
  EXPECT_TRUE(back.slices().empty());
}

// Into memory the caller keeps (the elastic runtime's shared memory): the pack is written there
// while it fits, and moves whole to the overflow buffer when it does not.
TEST(MemoryState, APackedWriterIntoAPlaceSpillsWholeIntoItsOverflowWhenThePackOutgrowsIt) {
  MemoryCheckpoint expected(1);
  write_sample(expected, 7);
  const auto reference = pack_memory_checkpoint(expected);

  std::vector<std::uint8_t> place(reference.size() + 100, 0xee);
  std::vector<std::uint8_t> overflow;
  PackedCheckpointWriter roomy(place, overflow);
  write_sample(roomy, 7);
  roomy.finish();
  EXPECT_FALSE(roomy.overflowed());
  EXPECT_EQ(roomy.size(), reference.size());
  EXPECT_EQ(std::vector<std::uint8_t>(place.begin(), place.begin() + roomy.size()), reference);
  EXPECT_EQ(place.back(), 0xee) << "nothing written past the pack";
  EXPECT_TRUE(overflow.empty());

  std::vector<std::uint8_t> small(reference.size() / 3, 0xee);
  PackedCheckpointWriter cramped(small, overflow);
  write_sample(cramped, 7);
  cramped.finish();
  EXPECT_TRUE(cramped.overflowed());
  EXPECT_EQ(cramped.size(), reference.size());
  EXPECT_EQ(overflow, reference);

  // A name written twice is still caught after the move.
  std::vector<std::uint8_t> tiny(8);
  PackedCheckpointWriter twice(tiny, overflow);
  twice.put("b", text_bytes("1"));
  twice.put("b", text_bytes("2"));
  EXPECT_THROW(twice.finish(), CheckpointError);
}

TEST(MemoryState, APackedWriterRefusesABlobOrASliceWrittenTwiceAtFinish) {
  std::vector<std::uint8_t> packed;
  PackedCheckpointWriter blobs(packed);
  blobs.put("b", text_bytes("1"));
  blobs.put("a", text_bytes("2"));
  blobs.put("b", text_bytes("3"));
  EXPECT_EQ(error_of([&] { blobs.finish(); }),
            "strategy state: blob 'b' written twice (by two ranks or twice by one); each rank's "
            "blob names must differ from every other rank's");

  PackedCheckpointWriter slices(packed);
  const auto slice = rows_of("weight", 1, 3, StateKind::optimizer_state, 1);
  slices.put_slice(slice, values_for(slice, 1));
  slices.put_slice(rows_of("weight", 1, 3), values_for(slice, 2));  // another kind: no clash
  slices.put("2.weight", text_bytes("a blob named like the slice: no clash"));
  slices.put_slice(slice, values_for(slice, 3));
  EXPECT_EQ(
      error_of([&] { slices.finish(); }),
      "strategy state: slice '2.weight/optimizer_state1/d0[1:3]/e[0:6]' written twice (by two "
      "ranks or twice by one); ranks must write disjoint parts of each parameter");

  // A slice equal in all but its shape is another slice.
  PackedCheckpointWriter shapes(packed);
  auto wider = slice;
  wider.shape = {4, 6};
  wider.last = 12;
  shapes.put_slice(slice, values_for(slice, 1));
  shapes.put_slice(wider, values_for(wider, 1));
  EXPECT_NO_THROW(shapes.finish());
}

TEST(MemoryState, APackedWriterRefusesASliceThatIsNoPartOfItsParameter) {
  std::vector<std::uint8_t> packed;
  PackedCheckpointWriter writer(packed);
  auto beyond = rows_of("weight", 3, 5);
  EXPECT_THROW(writer.put_slice(beyond, std::vector<float>(6)), InvalidArgument);
  const auto slice = rows_of("weight", 0, 1);
  EXPECT_THROW(writer.put_slice(slice, std::vector<float>(2)), InvalidArgument);
}

TEST(MemoryState, UnpackSaysBytesEndEarlyWhereverAPackIsCutInsideARecord) {
  // The packs of the first k records end where a cut leaves whole records.
  std::vector<std::size_t> boundaries{0};
  {
    MemoryCheckpoint one(1);
    one.put("a/manifest", text_bytes("{\"step\": 3}"));
    boundaries.push_back(pack_memory_checkpoint(one).size());
    one.put("b/empty", {});
    boundaries.push_back(pack_memory_checkpoint(one).size());
    for (const auto& slice :
         {rows_of("weight", 0, 2), rows_of("weight", 0, 2, StateKind::optimizer_state, 1),
          rows_of("bias", 1, 4)}) {
      one.put_slice(slice, values_for(slice, 0));
      boundaries.push_back(pack_memory_checkpoint(one).size());
    }
  }
  MemoryCheckpoint whole(1);
  write_sample(whole, 1);
  const auto packed = pack_memory_checkpoint(whole);
  ASSERT_EQ(boundaries.back(), packed.size());
  for (std::size_t cut = 0; cut < packed.size(); ++cut) {
    MemoryCheckpoint into(1);
    const auto part = std::span<const std::uint8_t>(packed).first(cut);
    const auto records = std::ranges::find(boundaries, cut);
    if (records != boundaries.end()) {
      EXPECT_NO_THROW(unpack_memory_checkpoint(part, into)) << "cut at " << cut;
      EXPECT_EQ(into.blobs().size() + into.slices().size(),
                static_cast<std::size_t>(records - boundaries.begin()));
    } else {
      EXPECT_EQ(error_of([&] { unpack_memory_checkpoint(part, into); }),
                "strategy state held in memory: its packed bytes end early")
          << "cut at " << cut;
    }
  }
}

TEST(MemoryState, UnpackRefusesUnknownRecordsAndSlicesThatAreNoPartOfTheirParameter) {
  MemoryCheckpoint one(1);
  const auto slice = rows_of("w", 0, 2);  // param "w": the fields lie at fixed offsets
  one.put_slice(slice, values_for(slice, 1));
  const auto packed = pack_memory_checkpoint(one);
  // kind, layer, param length, "w", rank, 2 extents, slice kind, slot, dim, begin, end, first, last
  constexpr std::size_t kRank = 8 * 3 + 1;
  constexpr std::size_t kExtent0 = kRank + 8;
  constexpr std::size_t kSliceKind = kExtent0 + 16;
  constexpr std::size_t kEnd = kSliceKind + 8 * 4;
  constexpr std::size_t kLast = kEnd + 16;
  const auto refused = [&](std::size_t at, std::uint64_t value) {
    auto bytes = packed;
    put_u64_at(bytes, at, value);
    MemoryCheckpoint into(1);
    return error_of([&] { unpack_memory_checkpoint(bytes, into); });
  };
  EXPECT_EQ(refused(0, 9),
            "strategy state held in memory: its packed bytes hold a record of unknown kind 9");
  EXPECT_EQ(refused(kRank, 65), "strategy state held in memory: a slice of rank 65");
  EXPECT_EQ(refused(kSliceKind, 2), "strategy state held in memory: a slice of unknown kind 2");
  EXPECT_EQ(refused(kEnd, 5),
            "strategy state held in memory: the slice takes [0, 5) of dimension 0, which has 4 "
            "entries");
  // A slice whose byte count overflows ends early instead of asking for that much memory.
  auto huge = packed;
  const std::uint64_t rows = std::uint64_t{1} << 62;  // times sizeof(float) wraps to 0
  put_u64_at(huge, kExtent0, rows);
  put_u64_at(huge, kExtent0 + 8, 1);
  put_u64_at(huge, kEnd, rows);
  put_u64_at(huge, kLast, rows);
  MemoryCheckpoint into(1);
  EXPECT_EQ(error_of([&] { unpack_memory_checkpoint(huge, into); }),
            "strategy state held in memory: its packed bytes end early");
}

TEST(MemoryState, ALayoutDigestSeesNamesSizesAndOrderButNotValues) {
  const auto digest = [](const std::function<void(CheckpointWriter&)>& write) {
    std::vector<std::uint8_t> packed;
    PackedCheckpointWriter writer(packed);
    write(writer);
    writer.finish();
    return packed_layout_digest(packed);
  };
  const auto sample = digest([](CheckpointWriter& w) { write_sample(w, 1); });
  EXPECT_EQ(digest([](CheckpointWriter& w) { write_sample(w, 9); }), sample);
  EXPECT_NE(digest([](CheckpointWriter& w) {
              write_sample(w, 1);
              w.put("c", {});
            }),
            sample);
  EXPECT_NE(digest([](CheckpointWriter& w) { w.put("a", text_bytes("12")); }),
            digest([](CheckpointWriter& w) { w.put("a", text_bytes("123")); }));
  EXPECT_NE(digest([](CheckpointWriter& w) {
              w.put_slice(rows_of("w", 0, 1), values_for(rows_of("w", 0, 1), 0));
            }),
            digest([](CheckpointWriter& w) {
              w.put_slice(rows_of("w", 1, 2), values_for(rows_of("w", 1, 2), 0));
            }));
  EXPECT_THROW((void)packed_layout_digest(std::vector<std::uint8_t>{1, 2, 3}), CheckpointError);
}

}  // namespace
}  // namespace tessera
