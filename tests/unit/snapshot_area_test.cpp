// SnapshotArea: a rank's newest saves in shared memory, read by the ranks of its host that keep
// its copies; what they read must be a published slot, whole, even after the writer is gone or
// while it writes.
#include "snapshot_area.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace tessera::elastic {
namespace {

std::vector<std::uint8_t> bytes_of(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::uint8_t>(seed + i * 7);
  return out;
}

void write(SnapshotArea& area, std::size_t slot, std::int64_t step,
           const std::vector<std::uint8_t>& data) {
  auto place = area.begin_write(slot);
  if (place.size() < data.size()) place = area.grow(slot, data.size());
  std::memcpy(place.data(), data.data(), data.size());
  area.publish(slot, step, 0, 8 * step, 3, data.size());
}

bool named_in_dev_shm(const SnapshotArea& area) {
  return std::filesystem::exists(
      "/dev/shm" + SnapshotArea::name_of(area.pid_namespace(), area.pid(), area.nonce()));
}

TEST(SnapshotArea, AHolderReadsThePublishedSlotsNewestFirstAfterTheWriterIsGone) {
  auto area = std::make_unique<SnapshotArea>(3, 4096);
  const auto one = bytes_of(1000, 1);
  const auto two = bytes_of(3000, 2);
  write(*area, 0, 1, one);
  write(*area, 1, 2, two);
  auto handle = SnapshotHandle::open(area->pid_namespace(), area->pid(), area->nonce());
  ASSERT_TRUE(handle);
  area->unlink();
  EXPECT_FALSE(named_in_dev_shm(*area)) << "the name goes once the holders have it open";
  area.reset();  // the writer's process ends: its mapping and descriptor go

  const auto held = handle->read();
  ASSERT_EQ(held.size(), 2U);
  EXPECT_EQ(held[0].step, 2);
  EXPECT_EQ(held[0].samples, 16);
  EXPECT_EQ(held[0].world_size, 3);
  EXPECT_EQ(held[0].bytes, two);
  EXPECT_EQ(held[1].step, 1);
  EXPECT_EQ(held[1].bytes, one);
}

TEST(SnapshotArea, ASlotBeingWrittenIsNotReadAndAPublishedOneReplacesItsPredecessor) {
  SnapshotArea area(3, 4096);
  write(area, 0, 1, bytes_of(100, 1));
  write(area, 1, 2, bytes_of(100, 2));
  auto handle = SnapshotHandle::open(area.pid_namespace(), area.pid(), area.nonce());
  ASSERT_TRUE(handle);
  // A writer killed half way through slot 0: its old content must not be taken for step 1 any
  // more, nor the half-written one for anything.
  auto place = area.begin_write(0);
  std::memset(place.data(), 0xff, 50);
  auto held = handle->read();
  ASSERT_EQ(held.size(), 1U);
  EXPECT_EQ(held[0].step, 2);
  area.publish(0, 3, 0, 24, 3, 100);
  held = handle->read();
  ASSERT_EQ(held.size(), 2U);
  EXPECT_EQ(held[0].step, 3);
  EXPECT_EQ(held[1].step, 2);
}

TEST(SnapshotArea, APackThatOutgrowsItsSlotMovesAndIsReadWhole) {
  SnapshotArea area(3, 4096);
  auto handle = SnapshotHandle::open(area.pid_namespace(), area.pid(), area.nonce());
  ASSERT_TRUE(handle);
  write(area, 0, 1, bytes_of(4000, 1));
  const auto big = bytes_of(50000, 9);
  write(area, 1, 2, big);  // grows past the slot
  const auto held = handle->read();
  ASSERT_EQ(held.size(), 2U);
  EXPECT_EQ(held[0].bytes, big);
  EXPECT_EQ(held[1].bytes, bytes_of(4000, 1));
  EXPECT_EQ(std::vector<std::uint8_t>(area.bytes(1).begin(), area.bytes(1).end()), big);
}

TEST(SnapshotArea, NoAreaOfThatNameIsNoHolderAndOnlyOrphansOfThisPidNamespaceAreRemoved) {
  SnapshotArea probe(3, 64);
  const auto ns = probe.pid_namespace();
  ASSERT_GT(ns, 0) << "/proc/self/ns/pid names this process's pid namespace";
  EXPECT_FALSE(SnapshotHandle::open(ns, ::getpid(), 12345)) << "an owner on another host";
  // A name left by a process of this namespace that is gone (killed before the holders opened
  // its area), and one of a pid that no process here has but another namespace may.
  const auto touch = [](const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr) << path;
    std::fclose(f);
  };
  const std::string orphan = "/dev/shm" + SnapshotArea::name_of(ns, 999999999, 1);
  const std::string foreign = "/dev/shm" + SnapshotArea::name_of(ns + 1, 999999999, 1);
  touch(orphan);
  touch(foreign);
  SnapshotArea area(3, 64);
  EXPECT_FALSE(std::filesystem::exists(orphan));
  EXPECT_TRUE(std::filesystem::exists(foreign)) << "its pid cannot be judged from here";
  EXPECT_TRUE(named_in_dev_shm(area));
  std::filesystem::remove(foreign);
}

}  // namespace
}  // namespace tessera::elastic
