// A ucx job whose collectives time out fails with the rank's error and a plain non-zero exit:
// no rank may crash on its error path (an error made by the ucx plugin was once destroyed
// after the plugin's library was closed, and most runs ended in SIGSEGV, exit 139).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace {

namespace fs = std::filesystem;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(TrainOverUcx, ATimedOutCollectiveEndsWithTheErrorNeverACrash) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist"))
    GTEST_SKIP() << "the sample config trains on /usr/share/datasets/fashion-mnist, not installed";
  const fs::path dir =
      fs::temp_directory_path() / ("tessera-ucx-error-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // The command, run where its checkpoints may go; the timing decides which rank times
  // out first and whether the other sees an aborted group, so it runs several times.
  const std::string command = "cd " + dir.string() + " && UCX_TLS=tcp timeout 120 " +
                              TESSERA_CLI_PATH + " train --config " + TESSERA_SAMPLE_CONFIGS +
                              "/ddp.ini -n 2 --runtime.transport=ucx --transport.ucx.timeout=1ms" +
                              " --train.progress=off > out.txt 2>&1";
  for (int run = 0; run < 6; ++run) {
    const int status = std::system(command.c_str());
    std::ifstream in(dir / "out.txt");
    const std::string out{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    ASSERT_TRUE(WIFEXITED(status)) << out;
    EXPECT_EQ(WEXITSTATUS(status), 1) << "run " << run << ":\n" << out;
    EXPECT_FALSE(contains(out, "SIGSEGV")) << "run " << run << ":\n" << out;
    EXPECT_TRUE(contains(out, "exited with code 1")) << "run " << run << ":\n" << out;
    EXPECT_TRUE(contains(out, "tessera: error: ")) << "run " << run << ":\n" << out;
  }
  fs::remove_all(dir);
}

}  // namespace
