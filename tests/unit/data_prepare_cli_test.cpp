// `tessera data prepare` as a user runs it: what it writes is what the `text` data set reads, and
// each mistake exits with the CLI's codes (2: usage, 1: data) and a message naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli_run_support.hpp"
#include "text/text_dataset.hpp"

namespace tessera::text {
namespace {

namespace fs = std::filesystem;
using testing::CliRun;

class DataPrepareCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-data-cli-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `tessera data ARGS` in the scratch folder, stdout and stderr captured.
  CliRun data(const std::string& args) {
    return testing::run_cli(TESSERA_CLI_PATH, dir_, "data " + args);
  }

  fs::path dir_;
};

TEST_F(DataPrepareCli, WritesTheTokenFileTheTextDataSetReads) {
  {
    std::ofstream text(dir_ / "notes.txt", std::ios::binary);
    for (int i = 0; i < 1001; ++i) text.put(static_cast<char>('a' + i % 26));
  }
  const CliRun run = data("prepare notes.txt --output notes.tokens --validation 0.25");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("prepared notes.tokens from notes.txt: 1 document(s), 1001 byte tokens "
                         "(training 751, validation 250), CRC-32 "),
            std::string::npos)
      << run.out;
  const TextDataset data_set(TextConfig{dir_ / "notes.tokens", 7});
  EXPECT_EQ(data_set.size(Split::train), 107U);  // (751 - 1) / 7
  EXPECT_EQ(data_set.size(Split::test), 35U);    // (250 - 1) / 7
  const Batch batch = data_set.gather(Split::test, std::vector<std::size_t>{0});
  EXPECT_EQ(batch.inputs.as<std::int64_t>()[0], 'a' + 751 % 26);
}

TEST_F(DataPrepareCli, AMissingCorpusExitsOneNamingItAndThePackage) {
  const CliRun run = data("prepare absent-folder");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.err,
            "tessera: error: absent-folder: corpus not found; install the package linux-doc-6.1 "
            "(tools/dev/install-deps.sh does) or name another corpus file or folder\n");
  EXPECT_FALSE(fs::exists(dir_ / kDefaultTokenFile));
}

TEST_F(DataPrepareCli, UsageMistakesExitTwo) {
  for (const char* args : {"prepare --validation 0", "prepare --validation 1", "prepare a b",
                           "prepare --outptu x", "prepar"}) {
    const CliRun run = data(args);
    EXPECT_EQ(run.exit_code, 2) << args << ": " << run.err;
    const bool says_what_to_do =
        run.err.find("usage: tessera data prepare") != std::string::npos ||
        run.err.find("give a fraction above 0 and below 1") != std::string::npos;
    EXPECT_TRUE(says_what_to_do) << args << ": " << run.err;
  }
  EXPECT_NE(data("prepar").err.find("did you mean 'prepare'?"), std::string::npos);
}

}  // namespace
}  // namespace tessera::text
