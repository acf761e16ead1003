#pragma once
// Checkpoints for tests: forging manifests to test the consistency checks (the JSON is edited and
// its CRC recomputed, so the manifest still verifies its own checksum), and an in-memory
// checkpoint whose blobs and slices a test can tamper with.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/base/error.hpp"
#include "tessera/runtime/checkpoint.hpp"

namespace tessera::testing {

using Json = nlohmann::ordered_json;

inline std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The manifest of `folder` (format 2) edited by `edit` and sealed with a fresh CRC, computed as
// the reader does: over the two-space-indented dump without the "manifest_crc32" field.
inline void forge_manifest(const std::filesystem::path& folder,
                           const std::function<void(Json&)>& edit) {
  const auto file = folder / "manifest";
  Json manifest = Json::parse(read_text(file));
  manifest.erase("manifest_crc32");
  edit(manifest);
  const auto body = manifest.dump(2);
  char crc[9];
  std::snprintf(crc, sizeof crc, "%08x",
                crc32(std::as_bytes(std::span<const char>(body.data(), body.size()))));
  manifest["manifest_crc32"] = crc;
  std::ofstream(file, std::ios::binary | std::ios::trunc) << manifest.dump(2) << "\n";
}

// `text` with the first `from` replaced by `to`; a test failure if there is none.
inline std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "'" << from << "' not in:\n" << text;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// Blobs and slices in memory; every rank writes into the same one (thread-safe puts).
class MemoryCheckpoint final : public CheckpointWriter, public CheckpointReader {
 public:
  explicit MemoryCheckpoint(int world) : world_(world) {}
  // Every blob and slice of a checkpoint on disk, to tamper with in memory.
  static std::unique_ptr<MemoryCheckpoint> copy_of(const FileCheckpointReader& reader) {
    auto copy = std::make_unique<MemoryCheckpoint>(reader.saved_world_size());
    const auto slices = reader.slices();
    for (const auto& blob : reader.manifest().blobs) {
      if (!blob.slice) copy->put(blob.name, reader.get(blob.name));
    }
    for (std::size_t i = 0; i < slices.size(); ++i)
      copy->put_slice(slices[i], reader.slice_values(i));
    return copy;
  }

  void put(const std::string& name, std::span<const std::byte> bytes) override {
    std::lock_guard lock(mutex_);
    blobs_[name].assign(bytes.begin(), bytes.end());
  }
  void put_slice(const StateSlice& slice, std::span<const float> values) override {
    const auto problem = slice_problem(slice);
    if (!problem.empty()) throw InvalidArgument("put_slice: the slice " + problem);
    if (values.size() != slice.elements()) throw InvalidArgument("put_slice: wrong value count");
    std::lock_guard lock(mutex_);
    slices_.push_back({slice, std::vector<float>(values.begin(), values.end())});
  }
  [[nodiscard]] std::vector<std::byte> get(const std::string& name) const override {
    std::lock_guard lock(mutex_);
    const auto it = blobs_.find(name);
    if (it == blobs_.end()) throw CheckpointError("no blob " + name);
    return it->second;
  }
  [[nodiscard]] bool contains(const std::string& name) const override {
    std::lock_guard lock(mutex_);
    return blobs_.count(name) != 0;
  }
  [[nodiscard]] std::vector<StateSlice> slices() const override {
    std::lock_guard lock(mutex_);
    std::vector<StateSlice> out;
    for (const auto& s : slices_) out.push_back(s.first);
    return out;
  }
  [[nodiscard]] std::vector<float> slice_values(std::size_t index) const override {
    std::lock_guard lock(mutex_);
    return slices_.at(index).second;
  }
  [[nodiscard]] int saved_world_size() const override { return world_; }

  void set_text(const std::string& name, const std::string& text) {
    put(name, std::as_bytes(std::span<const char>(text.data(), text.size())));
  }
  [[nodiscard]] std::string text(const std::string& name) const {
    const auto bytes = get(name);
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
  }
  void erase(const std::string& name) {
    std::lock_guard lock(mutex_);
    blobs_.erase(name);
  }
  // The slices in write order, with their values, for a test to edit.
  [[nodiscard]] std::vector<std::pair<StateSlice, std::vector<float>>>& slice_list() {
    return slices_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::vector<std::byte>> blobs_;
  std::vector<std::pair<StateSlice, std::vector<float>>> slices_;
  int world_;
};

}  // namespace tessera::testing
