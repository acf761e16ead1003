// `tessera bench collectives` end to end with the real binary: every row checked correct,
// --json writing nothing but one JSON object per row on stdout (also over ucx, whose library
// logs to stdout unless pointed elsewhere), and bad arguments refused with exit status 2.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

class BenchCollectives : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-bench-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs the CLI with `environment` prefixed; stdout and stderr go to separate files. Returns
  // the exit status (-1 if it did not exit normally).
  int bench(const std::string& arguments, const std::string& environment = "") const {
    const std::string command = environment + " timeout 120 " + std::string(TESSERA_CLI_PATH) +
                                " bench collectives " + arguments + " > " +
                                (dir_ / "out.txt").string() + " 2> " + (dir_ / "err.txt").string();
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  [[nodiscard]] std::vector<std::string> lines(const char* file) const {
    std::ifstream in(dir_ / file);
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }
  [[nodiscard]] std::string text(const char* file) const {
    std::ostringstream all;
    for (const auto& line : lines(file)) all << line << "\n";
    return all.str();
  }

  // Every stdout line is one JSON row with the fields, all correct; returns the
  // "op bytes" of each row.
  std::set<std::string> json_rows() const {
    std::set<std::string> rows;
    for (const std::string& line : lines("out.txt")) {
      EXPECT_TRUE(line.size() > 2 && line.front() == '{' && line.back() == '}')
          << "not a JSON row: " << line << "\nstderr:\n"
          << text("err.txt");
      for (const char* field : {"\"op\":", "\"bytes\":", "\"time_us_median\":", "\"time_us_min\":",
                                "\"algbw_gbps\":", "\"busbw_gbps\":"}) {
        EXPECT_NE(line.find(field), std::string::npos) << field << " missing in " << line;
      }
      EXPECT_NE(line.find("\"ok\":true"), std::string::npos) << line;
      const auto op = line.find("\"op\":\"");
      const auto bytes = line.find("\"bytes\":");
      if (op == std::string::npos || bytes == std::string::npos) continue;
      const auto op_end = line.find('"', op + 6);
      const auto bytes_end = line.find(',', bytes);
      rows.insert(line.substr(op + 6, op_end - op - 6) + " " +
                  line.substr(bytes + 8, bytes_end - bytes - 8));
    }
    return rows;
  }

  fs::path dir_;
};

const std::set<std::string> kExpectedRows = {
    "all_reduce 4096", "all_reduce 262144", "reduce_scatter 4096", "reduce_scatter 262144",
    "all_gather 4096", "all_gather 262144", "broadcast 4096",      "broadcast 262144"};

TEST_F(BenchCollectives, ShmJsonIsOneCorrectRowPerOperationAndSize) {
  ASSERT_EQ(bench("--transport shm -n 2 --sizes 4K,256K --reps 3 --json"), 0) << text("err.txt");
  EXPECT_EQ(json_rows(), kExpectedRows);
}

TEST_F(BenchCollectives, TableHasAHeaderAndAnOkRowPerOperationAndSize) {
  ASSERT_EQ(bench("--transport local -n 3 --ops all_reduce,broadcast --sizes 1K,64K --reps 3"), 0)
      << text("err.txt");
  const auto out = lines("out.txt");
  int ok_rows = 0;
  for (const auto& line : out) {
    if (line.find("all_reduce") != std::string::npos || line.find("broadcast") != std::string::npos)
      ok_rows += line.find(" ok") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(ok_rows, 4) << text("out.txt");
  EXPECT_NE(text("out.txt").find("algbw"), std::string::npos) << text("out.txt");
}

// UCX writes its log (for instance its refusal of peer error handling over shared memory) to
// stdout unless UCX_LOG_FILE says otherwise; the CLI points it at stderr, so --json stays JSON.
TEST_F(BenchCollectives, UcxJsonOverSharedMemoryStaysMachineReadable) {
  if (!fs::exists(fs::path(TESSERA_PLUGIN_DIR) / "libtessera_transport_ucx.so"))
    GTEST_SKIP() << "the ucx plugin was not built (no UCX found by pkg-config)";
  ASSERT_EQ(bench("--transport ucx -n 2 --sizes 4K,256K --reps 3 --json", "UCX_TLS=sm,self"), 0)
      << text("err.txt");
  EXPECT_EQ(json_rows(), kExpectedRows);
}

TEST_F(BenchCollectives, AnUnknownOperationIsAUsageError) {
  EXPECT_EQ(bench("--transport local -n 2 --ops all_reduce,barrier"), 2);
  EXPECT_NE(text("err.txt").find("unknown collective 'barrier'"), std::string::npos)
      << text("err.txt");
}

}  // namespace
