// Checkpoint files: atomic commits, manifests with CRC-32, refusal of damaged checkpoints.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "checkpoint_test_support.hpp"
#include "ddp_test_support.hpp"
#include "tessera/base/error.hpp"
#include "tessera/runtime/checkpoint.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::forge_manifest;
using testing::Json;
using testing::read_text;
using testing::replaced;

class CheckpointFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tessera-checkpoint-test-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Two ranks each write one blob whose bytes depend on the step; like the trainer, the
  // fixture's writes may prune only the checkpoints it wrote itself.
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
          CheckpointRetention{owned_, keep}, testing::kTestTimeout);
      if (world->rank() == 0) folder = written;
    });
    std::erase(owned_, folder);
    owned_.push_back(folder);
    return folder;
  }

  static std::string text(const std::vector<std::byte>& bytes) {
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
  }

  static fs::path blob_file(const fs::path& folder) { return folder / "r1-0.bin"; }

  // The reader's refusal message, or a failure if it accepted the folder.
  static std::string refusal(const fs::path& folder) {
    try {
      const FileCheckpointReader reader(folder);
      ADD_FAILURE() << "an inconsistent checkpoint was accepted: " << folder;
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return {};
  }

  fs::path root_;
  std::vector<fs::path> owned_;
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

TEST_F(CheckpointFiles, PruningRemovesOnlyCheckpointsTheSameWriterCommitted) {
  write(1);
  write(2);
  owned_.clear();  // a new run in the same folder: steps 1 and 2 are not its own
  write(3);
  write(4);
  write(5);
  std::vector<std::string> left;
  for (const auto& folder : list_checkpoints(root_)) left.push_back(folder.filename().string());
  EXPECT_EQ(left, (std::vector<std::string>{"step-000000000001", "step-000000000002",
                                            "step-000000000004", "step-000000000005"}));
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
  content = replaced(content, "\"step\": 1,", "\"step\": 9,");
  std::ofstream(manifest) << content;
  EXPECT_THROW(FileCheckpointReader{folder}, CheckpointError);
}

TEST_F(CheckpointFiles, TheCrcErrorShowsTheStoredAndTheComputedChecksum) {
  const auto folder = write(1);
  const auto manifest = folder / "manifest";
  std::string content = read_text(manifest);
  const auto stored = content.substr(content.rfind("\"manifest_crc32\": \"") + 19, 8);
  content = replaced(content, "\"step\": 1,", "\"step\": 9,");
  std::ofstream(manifest, std::ios::binary | std::ios::trunc) << content;
  const auto message = refusal(folder);
  EXPECT_NE(message.find("stored " + stored), std::string::npos) << message;
  const auto computed_at = message.find("computed ");
  ASSERT_NE(computed_at, std::string::npos) << message;
  EXPECT_NE(message.substr(computed_at + 9, 8), stored) << message;
}

TEST_F(CheckpointFiles, BytesAfterTheManifestAreRefusedWithTheirLineAndColumn) {
  const auto folder = write(1);
  const auto original = read_text(folder / "manifest");
  const auto lines = std::count(original.begin(), original.end(), '\n');
  std::ofstream(folder / "manifest", std::ios::binary | std::ios::app) << "junk";
  const auto message = refusal(folder);
  // The JSON ends on line `lines`; the junk starts the next one.
  EXPECT_NE(message.find("manifest:" + std::to_string(lines + 1) + ":1: not valid JSON"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("truncated or corrupted"), std::string::npos) << message;
}

// Every way of cutting or soiling the JSON files of a checkpoint (the manifest, a rank's blob
// list) gives a message in words with the byte offset, never the JSON library's own text.
TEST_F(CheckpointFiles, DamagedJsonIsDescribedInWordsWithItsByteOffsetNeverInTheLibrarysTerms) {
  const auto folder = write(1);
  for (const auto* name : {"manifest", "rank-1.blobs"}) {
    const auto file = folder / name;
    const auto original = read_text(file);
    std::vector<std::string> damaged;
    // (A cut of the final newline alone leaves the same JSON, which is accepted.)
    const auto last = original.find_last_not_of(" \n");
    for (std::size_t cut = 0; cut <= last; ++cut) damaged.push_back(original.substr(0, cut));
    for (const std::string& junk :
         {std::string("junk"), std::string("}"), std::string(","), std::string("\x01"),
          std::string("\xff\xfe"), std::string("\"\\u12"), std::string("-"), std::string("1e")}) {
      damaged.push_back(original + junk);
      damaged.push_back(junk + original);
      damaged.push_back(original.substr(0, original.size() / 2) + junk +
                        original.substr(original.size() / 2));
    }
    for (const auto& text : damaged) {
      std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
      const auto message = refusal(folder);
      EXPECT_EQ(message.find("json.exception"), std::string::npos) << name << ": " << message;
      EXPECT_EQ(message.find("last read"), std::string::npos) << name << ": " << message;
      if (message.find("not valid JSON") != std::string::npos) {
        EXPECT_NE(message.find(" at byte "), std::string::npos) << name << ": " << message;
      }
    }
    std::ofstream(file, std::ios::binary | std::ios::trunc) << original;
  }
  EXPECT_NO_THROW(FileCheckpointReader{folder});
}

TEST_F(CheckpointFiles, ATruncatedManifestSaysTheTextEndsAndAtWhichByte) {
  const auto folder = write(1);
  const auto manifest = folder / "manifest";
  const auto size = fs::file_size(manifest);
  fs::resize_file(manifest, size / 2);
  const auto message = refusal(folder);
  EXPECT_NE(message.find("not valid JSON at byte " + std::to_string(size / 2) + " of " +
                         std::to_string(size / 2) + ": "),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("found the end of the text"), std::string::npos) << message;
}

// The JSON library stops at a NUL as at the end of its input: what follows one was accepted
// unread, while the same bytes without the NUL were refused.
TEST_F(CheckpointFiles, BytesAfterANulInTheManifestOrABlobListAreRefused) {
  const auto folder = write(1);
  for (const auto* name : {"manifest", "rank-0.blobs"}) {
    const auto file = folder / name;
    const auto original = read_text(file);
    std::ofstream(file, std::ios::binary | std::ios::app) << std::string("\0junk", 5);
    const auto message = refusal(folder);
    EXPECT_NE(message.find(std::string(name) + ":"), std::string::npos) << message;
    EXPECT_NE(message.find("at byte " + std::to_string(original.size()) + " of " +
                           std::to_string(original.size() + 5) + ": a NUL byte"),
              std::string::npos)
        << message;
    std::ofstream(file, std::ios::binary | std::ios::trunc) << original;
  }
}

TEST_F(CheckpointFiles, AManifestThatRepeatsAKeyIsRefused) {
  // The JSON library would keep the last "step" silently.
  const auto folder = write(1);
  forge_manifest(folder, [](Json&) {});
  auto content = read_text(folder / "manifest");
  content = replaced(content, "\"step\": 1,", "\"step\": 1,\n  \"step\": 1,");
  std::ofstream(folder / "manifest", std::ios::binary | std::ios::trunc) << content;
  const auto message = refusal(folder);
  EXPECT_NE(message.find("field \"step\" appears twice"), std::string::npos) << message;
}

TEST_F(CheckpointFiles, ANumberBeyondADoublesRangeIsRefusedNotThrownThrough) {
  // Valid JSON syntax that the parser cannot hold (found by the checkpoint_manifest fuzzer: it
  // escaped as the JSON library's own exception and ended the process).
  const auto folder = write(1);
  forge_manifest(folder, [](Json&) {});
  auto content = read_text(folder / "manifest");
  content = replaced(content, "\"step\": 1,", "\"step\": 7e77777777,");
  std::ofstream(folder / "manifest", std::ios::binary | std::ios::trunc) << content;
  const auto message = refusal(folder);
  EXPECT_NE(message.find("number overflow"), std::string::npos) << message;
  EXPECT_EQ(message.find("json.exception"), std::string::npos) << message;
  EXPECT_NE(message.find("the file is corrupted"), std::string::npos) << message;
}

TEST_F(CheckpointFiles, AManifestWhoseStepDisagreesWithItsFolderIsRefused) {
  const auto folder = write(1);
  forge_manifest(folder, [](Json& m) { m["step"] = 7; });
  const auto message = refusal(folder);
  EXPECT_NE(message.find("step 7, the folder's name step 1"), std::string::npos) << message;
}

TEST_F(CheckpointFiles, AManifestWithoutAStepOrWorldSizeIsRefused) {
  const auto folder = write(1);
  forge_manifest(folder, [](Json& m) { m.erase("step"); });
  const auto message = refusal(folder);
  EXPECT_NE(message.find("field \"step\" is missing"), std::string::npos) << message;
}

TEST_F(CheckpointFiles, AManifestOfASmallerWorldThanItsRankFilesIsRefused) {
  const auto folder = write(1);
  // Rank 1's blob relabelled as rank 0's, so every blob line names a rank of the world.
  forge_manifest(folder, [](Json& m) {
    m["world_size"] = 1;
    for (auto& blob : m["blobs"]) blob["rank"] = 0;
  });
  const auto message = refusal(folder);
  EXPECT_NE(message.find("r1-0.bin"), std::string::npos) << message;
}

TEST_F(CheckpointFiles, AManifestOfALargerWorldThanItsRankFilesIsRefused) {
  const auto folder = write(1);
  forge_manifest(folder, [](Json& m) { m["world_size"] = 3; });
  const auto message = refusal(folder);
  EXPECT_NE(message.find("rank-2.blobs is missing"), std::string::npos) << message;
}

// A rank's blob list says which blobs it wrote: without rank-1.blobs, rank 1's blob files
// alone do not make the checkpoint complete.
TEST_F(CheckpointFiles, ARankWhoseBlobListIsGoneIsMissingThoughItsBlobsRemain) {
  const auto folder = write(1);
  fs::remove(folder / "rank-1.blobs");
  ASSERT_TRUE(fs::exists(blob_file(folder)));
  const auto message = refusal(folder);
  EXPECT_NE(message.find("rank-1.blobs is missing"), std::string::npos) << message;
}

TEST_F(CheckpointFiles, ABlobOfARankOutsideTheWorldIsRefused) {
  const auto folder = write(1);
  forge_manifest(folder, [](Json& m) {
    for (auto& blob : m["blobs"]) {
      if (blob["rank"] == 1) blob["rank"] = 5;
    }
  });
  const auto message = refusal(folder);
  EXPECT_NE(message.find("rank 5, outside the manifest's world of 2"), std::string::npos)
      << message;
}

TEST_F(CheckpointFiles, AManifestThatDropsABlobOfItsRanksIsRefused) {
  const auto folder = write(1);
  forge_manifest(folder, [](Json& m) {
    auto& blobs = m["blobs"];
    for (std::size_t i = 0; i < blobs.size(); ++i) {
      if (blobs[i]["rank"] == 1) {
        blobs.erase(i);
        break;
      }
    }
  });
  const auto message = refusal(folder);
  EXPECT_NE(message.find("rank 1 wrote 1 blobs"), std::string::npos) << message;
}

TEST_F(CheckpointFiles, SlicesAreWrittenWithTheirDescriptionAndReadBack) {
  const StateSlice column{3, "fc.weight", {4, 6}, StateKind::optimizer_state, 1, 1, 3, 6, 2, 10};
  const std::vector<float> values = {1, 2, 3, 4, 5, 6, 7, 8};
  testing::run_ranks(2, [&](std::shared_ptr<Communicator> world) {
    (void)write_checkpoint(
        root_, 1, {}, *world,
        [&](CheckpointWriter& w) {
          if (world->rank() == 1) w.put_slice(column, values);
          EXPECT_THROW(w.put_slice(column, std::span(values).first(7)), InvalidArgument);
        },
        {}, testing::kTestTimeout);
  });
  const FileCheckpointReader reader(root_ / "step-000000000001");
  ASSERT_EQ(reader.slices(), std::vector<StateSlice>{column});
  EXPECT_EQ(reader.slice_values(0), values);
  EXPECT_EQ(reader.manifest().blobs.at(0).rank, 1);
  EXPECT_EQ(reader.manifest().blobs.at(0).name, "3.fc.weight/optimizer_state1/d1[3:6]/e[2:10]");
  const auto manifest = Json::parse(read_text(root_ / "step-000000000001" / "manifest"));
  EXPECT_EQ(manifest["blobs"][0]["slice"]["dim"], 1);
  EXPECT_EQ(manifest["blobs"][0]["slice"]["elements"], Json::array({2, 10}));
}

TEST_F(CheckpointFiles, ASliceWhoseDescriptionDisagreesWithItsBlobIsRefused) {
  const StateSlice rows{0, "w", {4, 6}, StateKind::parameter, 0, 0, 0, 4, 0, 24};
  testing::run_ranks(1, [&](std::shared_ptr<Communicator> world) {
    (void)write_checkpoint(
        root_, 1, {}, *world,
        [&](CheckpointWriter& w) { w.put_slice(rows, std::vector<float>(24)); }, {},
        testing::kTestTimeout);
  });
  const auto folder = root_ / "step-000000000001";
  forge_manifest(folder, [](Json& m) {
    m["blobs"][0]["slice"]["elements"] = Json::array({0, 12});
  });
  auto message = refusal(folder);
  EXPECT_NE(message.find("does not match its slice (0.w/parameter/d0[0:4]/e[0:12])"),
            std::string::npos)
      << message;
  forge_manifest(folder, [](Json& m) { m["blobs"][0]["slice"]["dim"] = 2; });
  message = refusal(folder);
  EXPECT_NE(message.find("slices dimension 2 of a parameter with 2"), std::string::npos) << message;
}

// A checkpoint of format 1 (round one's line manifest), as users have them on disk.
TEST(CheckpointFormatOne, RoundOneCheckpointsStillVerifyAndARenamedStepIsStillCaught) {
  const auto source =
      fs::path(TESSERA_TEST_DATA_DIR) / "checkpoint_v1" / "zero2-n2" / "step-000000000002";
  const FileCheckpointReader reader(source);
  EXPECT_EQ(reader.manifest().format_version, 1);
  EXPECT_EQ(reader.saved_world_size(), 2);
  EXPECT_EQ(reader.manifest().metadata.at("strategy"), "zero2");
  EXPECT_TRUE(reader.contains("sharded/manifest"));
  EXPECT_TRUE(reader.slices().empty());
  const auto copy = fs::temp_directory_path() /
                    ("tessera-format-one-" + std::to_string(::getpid())) / "step-000000000003";
  fs::create_directories(copy.parent_path());
  fs::copy(source, copy);
  try {
    const FileCheckpointReader renamed(copy);
    ADD_FAILURE() << "a format-1 manifest in a folder of another step was accepted";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("the manifest says step 2, the folder's name step 3"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(copy.parent_path());
}

TEST_F(CheckpointFiles, AFailedWriteLeavesNoNewCheckpointVisible) {
  const auto committed = write(1);
  // A real I/O failure: the file size limit makes write(2) fail with EFBIG, first inside a
  // blob, then (many small blobs) inside the manifest.
  const auto previous_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto attempt = [&](std::int64_t step, std::size_t blobs, std::size_t bytes) {
    rlimit tiny = saved;
    tiny.rlim_cur = 512;
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &tiny), 0);
    std::string error;
    try {
      testing::run_ranks(2, [&](std::shared_ptr<Communicator> world) {
        const std::string payload(bytes, 'x');
        (void)write_checkpoint(
            root_, step, {}, *world,
            [&](CheckpointWriter& w) {
              for (std::size_t i = 0; i < blobs; ++i) {
                w.put("a blob with a rather long name, so that the manifest grows quickly " +
                          std::to_string(world->rank()) + "/" + std::to_string(i),
                      std::as_bytes(std::span<const char>(payload.data(), payload.size())));
              }
            },
            CheckpointRetention{owned_, 1}, testing::kTestTimeout);
      });
    } catch (const CheckpointError& e) {
      error = e.what();
    }
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);
    return error;
  };
  const auto in_blob = attempt(2, 1, 4096);
  EXPECT_NE(in_blob.find("File too large"), std::string::npos) << in_blob;
  const auto in_manifest = attempt(3, 2, 8);  // each rank's list fits, the manifest does not
  EXPECT_NE(in_manifest.find("manifest"), std::string::npos) << in_manifest;
  std::signal(SIGXFSZ, previous_handler);

  EXPECT_EQ(latest_checkpoint(root_), committed);
  EXPECT_EQ(list_checkpoints(root_), std::vector<fs::path>{committed});
  const FileCheckpointReader intact(committed);
  EXPECT_EQ(text(intact.get("blob of rank 1")), "rank 1 step 1");
  const auto next = write(4);  // and the folder is usable again
  EXPECT_EQ(latest_checkpoint(root_), next);
}

TEST_F(CheckpointFiles, ResumeTakesTheNewestCheckpointEvenWithoutLatest) {
  write(1);
  const auto newest = write(2);
  fs::remove(root_ / "latest");
  const auto reader = open_newest_checkpoint(root_);
  ASSERT_TRUE(reader);
  EXPECT_EQ(reader->folder(), newest);
}

TEST_F(CheckpointFiles, ResumeRefusesADamagedNewestCheckpointNamingTheOlderOnes) {
  write(1);
  const auto newest = write(2);
  fs::resize_file(blob_file(newest), 3);
  try {
    (void)open_newest_checkpoint(root_);
    FAIL() << "passed over a damaged newest checkpoint";
  } catch (const CheckpointError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("step-000000000002"), std::string::npos) << message;
    EXPECT_NE(message.find("To resume from step-000000000001, move"), std::string::npos) << message;
  }
  EXPECT_TRUE(fs::exists(newest));
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
  EXPECT_EQ(open_newest_checkpoint(root_), nullptr);
}

TEST(Crc32, MatchesTheStandardCheckValue) {
  const std::string digits = "123456789";
  EXPECT_EQ(crc32(std::as_bytes(std::span<const char>(digits.data(), digits.size()))), 0xCBF43926U);
}

}  // namespace
}  // namespace tessera
