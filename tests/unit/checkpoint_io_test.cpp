// Checkpoint files: atomic commits, manifests with CRC-32, refusal of damaged checkpoints.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "ddp_test_support.hpp"
#include "tessera/checkpoint.hpp"
#include "tessera/error.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;

class CheckpointFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tessera-checkpoint-test-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Two ranks each write one blob whose bytes depend on the step.
  fs::path write(std::int64_t step, std::size_t keep = 2) {
    fs::path folder;
    testing::run_ranks(2, [&](std::shared_ptr<Communicator> world) {
      const std::string payload =
          "rank " + std::to_string(world->rank()) + " step " + std::to_string(step);
      auto written = write_checkpoint(
          root_, step, {{"epoch", "3"}}, *world,
          [&](CheckpointWriter& w) {
            w.put("blob of rank " + std::to_string(world->rank()),
                  std::as_bytes(std::span<const char>(payload.data(), payload.size())));
          },
          keep, testing::kTestTimeout);
      if (world->rank() == 0) folder = written;
    });
    return folder;
  }

  static std::string text(const std::vector<std::byte>& bytes) {
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
  }

  static fs::path blob_file(const fs::path& folder) { return folder / "r1-0.bin"; }

  fs::path root_;
};

TEST_F(CheckpointFiles, EveryRanksBlobsAreReadBackWithTheManifestsMetadata) {
  const auto folder = write(5);
  EXPECT_EQ(latest_checkpoint(root_), folder);
  const FileCheckpointReader reader(folder);
  EXPECT_EQ(reader.manifest().step, 5);
  EXPECT_EQ(reader.saved_world_size(), 2);
  EXPECT_EQ(reader.manifest().metadata.at("epoch"), "3");
  EXPECT_EQ(text(reader.get("blob of rank 0")), "rank 0 step 5");
  EXPECT_EQ(text(reader.get("blob of rank 1")), "rank 1 step 5");
  EXPECT_FALSE(reader.contains("missing"));
  EXPECT_THROW((void)reader.get("missing"), CheckpointError);
}

TEST_F(CheckpointFiles, OnlyTheNewestKeepCheckpointsRemain) {
  write(1);
  write(2);
  const auto newest = write(3);
  const auto folders = list_checkpoints(root_);
  ASSERT_EQ(folders.size(), 2U);
  EXPECT_EQ(folders.back(), newest);
  EXPECT_EQ(folders.front().filename(), "step-000000000002");
}

TEST_F(CheckpointFiles, ACorruptedBlobIsRefusedAndThePreviousCheckpointStaysIntact) {
  const auto previous = write(1);
  const auto latest = write(2);
  {
    std::fstream file(blob_file(latest), std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(2);
    file.put('X');  // same size, different bytes
  }
  try {
    const FileCheckpointReader reader(latest);
    FAIL() << "a corrupted blob was accepted";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("CRC-32"), std::string::npos) << e.what();
  }
  const FileCheckpointReader intact(previous);
  EXPECT_EQ(text(intact.get("blob of rank 1")), "rank 1 step 1");
}

TEST_F(CheckpointFiles, ATruncatedBlobIsRefusedNamingTheSizes) {
  const auto folder = write(1);
  fs::resize_file(blob_file(folder), 3);
  try {
    const FileCheckpointReader reader(folder);
    FAIL() << "a truncated blob was accepted";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointFiles, ATruncatedManifestIsRefused) {
  const auto folder = write(1);
  const auto manifest = folder / "manifest";
  fs::resize_file(manifest, fs::file_size(manifest) / 2);
  EXPECT_THROW(FileCheckpointReader{folder}, CheckpointError);
}

TEST_F(CheckpointFiles, AnEditedManifestFailsItsOwnChecksum) {
  const auto folder = write(1);
  const auto manifest = folder / "manifest";
  std::ifstream in(manifest);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  content.replace(content.find("step 1"), 6, "step 9");
  std::ofstream(manifest) << content;
  EXPECT_THROW(FileCheckpointReader{folder}, CheckpointError);
}

TEST_F(CheckpointFiles, AnInterruptedWriteLeavesTheCommittedCheckpointAsLatest) {
  const auto committed = write(1);
  // What a crash in the middle of writing step 2 leaves: a temporary folder, no commit.
  fs::create_directories(root_ / ".tmp-step-000000000002");
  std::ofstream(root_ / ".tmp-step-000000000002" / "r0-0.bin") << "partial";
  EXPECT_EQ(latest_checkpoint(root_), committed);
  EXPECT_EQ(list_checkpoints(root_).size(), 1U);
  const auto rewritten = write(2);  // the next attempt replaces the leftovers
  EXPECT_EQ(latest_checkpoint(root_), rewritten);
  EXPECT_FALSE(fs::exists(root_ / ".tmp-step-000000000002"));
}

TEST_F(CheckpointFiles, NoCheckpointYetIsNotAnError) {
  EXPECT_EQ(latest_checkpoint(root_), std::nullopt);
}

TEST(Crc32, MatchesTheStandardCheckValue) {
  const std::string digits = "123456789";
  EXPECT_EQ(crc32(std::as_bytes(std::span<const char>(digits.data(), digits.size()))), 0xCBF43926U);
}

}  // namespace
}  // namespace tessera
