// A shm world whose segment does not fit in /dev/shm is refused at connect, before anything is
// created, with the bytes needed against those free; without the check tmpfs accepts the
// (sparse) segment and the job dies of SIGBUS once its pages are touched, or here: waits for
// ranks that never come.
#include <gtest/gtest.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <string>

#include "fault_test_support.hpp"
#include "tessera/base/error.hpp"
#include "tessera/plugin/transport.hpp"

namespace tessera {
namespace {

using namespace std::chrono_literals;

TEST(ShmRoomTest, AWorldLargerThanDevShmIsRefusedNamingNeededAndFreeBytes) {
  struct statvfs fs {};
  ASSERT_EQ(::statvfs("/dev/shm", &fs), 0);
  const long double free_bytes =
      static_cast<long double>(fs.f_bavail) * static_cast<long double>(fs.f_frsize);
  // 64 ranks x 64 x 2 point-to-point channels of 1 GiB: 8 TiB, more than any /dev/shm.
  ASSERT_LT(free_bytes, 64.0L * 64 * 2 * (1LL << 30));

  const auto folder =
      std::filesystem::temp_directory_path() / ("tessera_shm_room_" + std::to_string(::getpid()));
  std::filesystem::remove_all(folder);
  const auto segments_before = fault_test::shm_segments_of({::getpid()});
  {
    PluginRegistry registry;
    registry.scan_directory(TESSERA_PLUGIN_DIR);
    auto store = registry.create<Store>(
        "file",
        fault_test::options_for(registry, PluginKind::store, "file", {{"path", folder.string()}}));
    auto transport = registry.create<Transport>(
        "shm", fault_test::options_for(registry, PluginKind::transport, "shm",
                                       {{"p2p_chunk_size", "1GiB"}}));
    const auto started = std::chrono::steady_clock::now();
    try {
      const auto comm = transport->connect(store, 0, 64, 5s);
      FAIL() << "a 64-rank world with 1 GiB channels was not refused";
    } catch (const TransportError& e) {
      const std::string what = e.what();
      EXPECT_TRUE(std::regex_search(
          what, std::regex("a world of 64 ranks needs a shared-memory segment of 8\\.0 TiB .*"
                           "64 x 64 x 2 x 1\\.0 GiB from p2p_chunk_size.*/dev/shm has only "
                           "[0-9.]+ [KMGT]?i?B free; enlarge /dev/shm")))
          << what;
      EXPECT_EQ(e.operation(), "connect");
    }
    // Refused at once, not after the connect timeout.
    EXPECT_LT(std::chrono::steady_clock::now() - started, 2s);
  }
  EXPECT_EQ(fault_test::shm_segments_of({::getpid()}), segments_before);
  std::filesystem::remove_all(folder);
}

}  // namespace
}  // namespace tessera
