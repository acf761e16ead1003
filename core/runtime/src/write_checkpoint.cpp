#include <algorithm>
#include <cstdio>
#include <string>

#include "durable_file.hpp"
#include "manifest.hpp"
#include "tessera/base/error.hpp"
#include "tessera/runtime/checkpoint.hpp"

namespace tessera {

namespace {

namespace fs = std::filesystem;

std::string step_folder_name(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%012lld", static_cast<long long>(step));
  return name;
}

// Puts each blob into its own file named by rank and sequence number, so ranks never collide
// and a blob name may be any text.
class FileCheckpointWriter final : public CheckpointWriter {
 public:
  FileCheckpointWriter(fs::path folder, int rank) : folder_(std::move(folder)), rank_(rank) {}

  void put(const std::string& name, std::span<const std::byte> bytes) override {
    TESSERA_CHECK(!name.empty() && name.find('\n') == std::string::npos,
                  "checkpoint blob names must be one non-empty line");
    const std::string file =
        "r" + std::to_string(rank_) + "-" + std::to_string(blobs_.size()) + ".bin";
    checkpoint::write_file_synced(folder_ / file, bytes);
    blobs_.push_back({name, file, bytes.size(), crc32(bytes), rank_, std::nullopt});
  }
  void put_slice(const StateSlice& slice, std::span<const float> values) override {
    const auto problem = slice_problem(slice);
    TESSERA_CHECK(problem.empty(), "put_slice: the slice " + problem);
    TESSERA_CHECK(values.size() == slice.elements(), "put_slice: " + std::to_string(values.size()) +
                                                         " values for a slice of " +
                                                         std::to_string(slice.elements()));
    put(slice_blob_name(slice), std::as_bytes(values));
    blobs_.back().slice = slice;
  }
  [[nodiscard]] const std::vector<CheckpointBlob>& blobs() const noexcept { return blobs_; }

 private:
  fs::path folder_;
  int rank_;
  std::vector<CheckpointBlob> blobs_;
};

// Every rank learns whether any rank failed, so that no rank waits for one that gave up.
void agree(Communicator& group, const std::string& failure, const std::string& phase,
           Duration timeout) {
  std::int32_t flag = failure.empty() ? 0 : 1;
  group.all_reduce({&flag, 1, DType::i32, Device::cpu()}, ReduceOp::max)->wait(timeout);
  if (!failure.empty()) throw CheckpointError(failure);
  if (flag != 0) throw CheckpointError("checkpoint: another rank failed while " + phase);
}

template <class Action>
std::string attempt(Action&& action) {
  try {
    action();
    return {};
  } catch (const std::exception& e) {
    return e.what();
  }
}

void commit(const fs::path& root, const fs::path& temporary, const fs::path& final_folder,
            const CheckpointManifest& manifest, const CheckpointRetention& retention) {
  checkpoint::write_file_synced(temporary / checkpoint::kManifestFile,
                                checkpoint::format_manifest(manifest));
  checkpoint::sync_directory(temporary);
  // A checkpoint of the same step is replaced only once the new one is complete.
  const fs::path displaced = root / (".old-" + final_folder.filename().string());
  if (fs::exists(final_folder)) {
    fs::remove_all(displaced);
    fs::rename(final_folder, displaced);
  }
  fs::rename(temporary, final_folder);
  checkpoint::sync_directory(root);
  checkpoint::replace_file_atomically(root / "latest", final_folder.filename().string() + "\n");
  fs::remove_all(displaced);
  // Only what this writer committed may go, whatever else the folder holds.
  std::vector<fs::path> owned;
  for (const auto& folder : retention.owned) {
    if (folder != final_folder && folder.parent_path() == final_folder.parent_path() &&
        fs::is_directory(folder))
      owned.push_back(folder);
  }
  const std::size_t keep_others = std::max<std::size_t>(retention.keep, 1) - 1;
  if (owned.size() > keep_others) {
    for (std::size_t i = 0; i + keep_others < owned.size(); ++i) fs::remove_all(owned[i]);
    checkpoint::sync_directory(root);
  }
}

}  // namespace

CheckpointParts::CheckpointParts(fs::path root, std::int64_t step,
                                 const std::string& temporary_name)
    : root_(std::move(root)),
      step_(step),
      final_folder_(root_ / step_folder_name(step)),
      temporary_(root_ / temporary_name) {}

void CheckpointParts::prepare() const {
  fs::create_directories(root_);
  fs::remove_all(temporary_);  // left by a crash during an earlier attempt
  fs::create_directory(temporary_);
}

void CheckpointParts::write_rank(int rank,
                                 const std::function<void(CheckpointWriter&)>& save) const {
  fs::create_directories(temporary_);
  FileCheckpointWriter writer(temporary_, rank);
  save(writer);
  checkpoint::write_file_synced(temporary_ / ("rank-" + std::to_string(rank) + ".blobs"),
                                checkpoint::format_blob_lines(writer.blobs()));
}

fs::path CheckpointParts::commit(int world_size, const std::map<std::string, std::string>& metadata,
                                 const CheckpointRetention& retention) const {
  CheckpointManifest manifest{step_, world_size, metadata, {}};
  for (int r = 0; r < world_size; ++r) {
    const fs::path part = temporary_ / ("rank-" + std::to_string(r) + ".blobs");
    const auto bytes = checkpoint::read_file(part);
    auto blobs = checkpoint::parse_blob_lines(
        std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()), part.string());
    for (auto& blob : blobs) {
      const bool duplicate =
          std::any_of(manifest.blobs.begin(), manifest.blobs.end(),
                      [&](const CheckpointBlob& b) { return b.name == blob.name; });
      if (duplicate) throw CheckpointError("checkpoint: two ranks wrote blob '" + blob.name + "'");
      manifest.blobs.push_back(std::move(blob));
    }
  }
  tessera::commit(root_, temporary_, final_folder_, manifest, retention);
  return final_folder_;
}

fs::path write_checkpoint(const fs::path& root, std::int64_t step,
                          const std::map<std::string, std::string>& metadata, Communicator& group,
                          const std::function<void(CheckpointWriter&)>& save,
                          const CheckpointRetention& retention, Duration timeout) {
  const int rank = group.rank();
  const CheckpointParts parts(root, step, ".tmp-" + step_folder_name(step));

  agree(group, rank != 0 ? std::string() : attempt([&] { parts.prepare(); }),
        "preparing " + parts.temporary().string(), timeout);
  agree(group, attempt([&] { parts.write_rank(rank, save); }), "writing blobs", timeout);
  agree(group, rank != 0 ? std::string() : attempt([&] {
          (void)parts.commit(group.size(), metadata, retention);
        }),
        "committing " + parts.final_folder().string(), timeout);
  return parts.final_folder();
}

std::optional<fs::path> latest_checkpoint(const fs::path& root) {
  const fs::path pointer = root / "latest";
  if (!fs::exists(pointer)) return std::nullopt;
  const auto bytes = checkpoint::read_file(pointer);
  std::string name(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  const fs::path folder = root / name;
  if (name.empty() || name.find('/') != std::string::npos || !fs::is_directory(folder)) {
    throw CheckpointError("checkpoint: " + pointer.string() + " names '" + name +
                          "', which is not a checkpoint folder");
  }
  return folder;
}

std::vector<fs::path> list_checkpoints(const fs::path& root) {
  std::vector<fs::path> folders;
  if (!fs::is_directory(root)) return folders;
  for (const auto& entry : fs::directory_iterator(root)) {
    const auto name = entry.path().filename().string();
    const bool step_name = name.size() > 5 && name.rfind("step-", 0) == 0 &&
                           name.find_first_not_of("0123456789", 5) == std::string::npos;
    if (step_name && entry.is_directory()) folders.push_back(entry.path());
  }
  std::sort(folders.begin(), folders.end());  // zero-padded step numbers sort as text
  return folders;
}

}  // namespace tessera
