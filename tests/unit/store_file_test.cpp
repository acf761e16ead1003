// What only the file store does: keys as files, atomicity across processes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "tessera/base/error.hpp"
#include "tessera/plugin/store.hpp"
#include "tessera/registry/registry.hpp"

namespace tessera {
namespace {

using namespace std::chrono_literals;

class FileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_.scan_directory(TESSERA_PLUGIN_DIR);
    folder_ = std::filesystem::temp_directory_path() /
              ("tessera_file_store_" + std::to_string(::getpid()) + "_" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(folder_);
  }
  void TearDown() override { std::filesystem::remove_all(folder_); }

  std::shared_ptr<Store> open(std::map<std::string, std::string> values = {}) {
    values.emplace("path", folder_.string());
    const auto defaults = registry_.default_options(PluginKind::store, "file");
    return registry_.create<Store>(
        "file", Options(defaults.section(), defaults.specs(), std::move(values)));
  }

  PluginRegistry registry_;
  std::filesystem::path folder_;
};

TEST_F(FileStoreTest, AddsFromSeveralProcessesAreNeverLost) {
  auto store = open();
  constexpr int kProcesses = 4;
  constexpr int kAddsEach = 50;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int code = 0;
      try {
        auto own = open();
        for (int i = 0; i < kAddsEach; ++i) own->add("count", 1);
      } catch (...) {
        code = 1;
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  for (const pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(store->get("count", 1s), std::to_string(kProcesses * kAddsEach));
}

TEST_F(FileStoreTest, KeysWithSlashesAndOddBytesStayDistinctFilesInOneFolder) {
  auto store = open();
  store->set("a/b", "1");
  store->set("a%2Fb", "2");
  store->set("..", "3");
  store->set(std::string("nul\0byte", 8), "4");
  EXPECT_EQ(store->get("a/b", 1s), "1");
  EXPECT_EQ(store->get("a%2Fb", 1s), "2");
  EXPECT_EQ(store->get("..", 1s), "3");
  EXPECT_EQ(store->get(std::string("nul\0byte", 8), 1s), "4");
  for (const auto& entry : std::filesystem::directory_iterator(folder_))
    EXPECT_TRUE(entry.is_regular_file()) << entry.path();
}

TEST_F(FileStoreTest, LeavesNoTemporaryFilesBehind) {
  auto store = open();
  for (int i = 0; i < 20; ++i) store->set("k", std::to_string(i));
  store->add("n", 1);
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(folder_)) {
    const auto name = entry.path().filename().string();
    EXPECT_FALSE(name.starts_with(".tmp")) << name;
    ++files;
  }
  EXPECT_EQ(files, 3);  // k, n and the lock file
}

TEST_F(FileStoreTest, AWriterTimesOutWhileAnotherHoldsTheLock) {
  auto store = open({{"timeout", "200ms"}});
  store->set("k", "v");  // creates the lock file
  const auto lock_path = folder_ / ".lock";
  // The child says on `locked` once it holds the lock, then holds it until it is killed (it
  // blocks reading `release`, which nobody writes).
  int locked[2];
  int release[2];
  ASSERT_EQ(::pipe(locked), 0);
  ASSERT_EQ(::pipe(release), 0);
  const pid_t holder = ::fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    const int fd = ::open(lock_path.c_str(), O_RDWR);
    const char ok = fd >= 0 && ::flock(fd, LOCK_EX) == 0 ? 'y' : 'n';
    (void)!::write(locked[1], &ok, 1);
    char never = 0;
    (void)!::read(release[0], &never, 1);
    ::_exit(0);
  }
  ::close(locked[1]);
  char ok = 0;
  ASSERT_EQ(::read(locked[0], &ok, 1), 1);
  ASSERT_EQ(ok, 'y') << "the child could not take the lock";
  EXPECT_THROW(store->set("k", "w"), Timeout);
  ::kill(holder, SIGKILL);
  int status = 0;
  ::waitpid(holder, &status, 0);
  for (const int fd : {locked[0], release[0], release[1]}) ::close(fd);
  store->set("k", "w");  // the lock died with its holder
  EXPECT_EQ(store->get("k", 1s), "w");
}

std::string file_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_F(FileStoreTest, AKeyFileHoldsItsLeaseNumberThenTheValue) {
  auto store = open();
  store->set("plain", "v");
  EXPECT_EQ(file_text(folder_ / "kplain"), "0\nv");
  const auto lease = store->grant_lease(60s);
  const auto number = std::to_string(static_cast<std::int64_t>(lease));
  store->set("bound", "w", lease);
  EXPECT_EQ(file_text(folder_ / "kbound"), number + "\nw");
  const auto lease_file = folder_ / (".lease." + number);
  EXPECT_NE(file_text(lease_file).find("\nkbound\n"), std::string::npos) << file_text(lease_file);
  store->revoke_lease(lease);
  EXPECT_FALSE(std::filesystem::exists(lease_file));
  EXPECT_FALSE(std::filesystem::exists(folder_ / "kbound"));
}

TEST_F(FileStoreTest, AGrantSweepsTheFilesOfEndedLeases) {
  auto store = open();
  const auto ended = store->grant_lease(20ms);
  store->set("gone", "v", ended);
  std::this_thread::sleep_for(20ms + kLeaseExpirySlack);  // the lease's end: what the test is about
  (void)store->grant_lease(60s);
  EXPECT_FALSE(std::filesystem::exists(
      folder_ / (".lease." + std::to_string(static_cast<std::int64_t>(ended)))));
  EXPECT_FALSE(std::filesystem::exists(folder_ / "kgone"));
}

TEST_F(FileStoreTest, AKeyFileOfAnOlderReleaseIsAClearError) {
  auto store = open();
  std::filesystem::create_directories(folder_);
  std::ofstream(folder_ / "kold") << "127.0.0.1:1234";
  try {
    (void)store->get("old", 1s);
    FAIL() << "an old key file was read as a value";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fresh folder"), std::string::npos) << e.what();
  }
}

TEST_F(FileStoreTest, AMissingPathIsAConfigError) {
  const auto defaults = registry_.default_options(PluginKind::store, "file");
  EXPECT_THROW(
      (void)registry_.create<Store>("file", Options(defaults.section(), defaults.specs(), {})),
      ConfigError);
}

}  // namespace
}  // namespace tessera
