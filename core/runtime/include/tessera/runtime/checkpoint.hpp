#pragma once
// Checkpoints on disk: a directory per checkpoint with one file per blob and a manifest (JSON)
// of every blob's size, CRC-32 and, for a slice of a parameter, its description; committed
// atomically so a crash never leaves a half-written checkpoint where a good one was.
// docs/training.md describes the format.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/plugin/checkpoint_io.hpp"
#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/strategy.hpp"

namespace tessera {

// One blob of a checkpoint: written by `rank` into `file` (relative to the checkpoint folder).
struct CheckpointBlob {
  std::string name;
  std::string file;
  std::uint64_t bytes = 0;
  std::uint32_t crc32 = 0;
  int rank = 0;
  std::optional<StateSlice> slice;  // set for a blob written by put_slice (format 2)
};

struct CheckpointManifest {
  std::int64_t step = 0;
  int world_size = 1;
  std::map<std::string, std::string> metadata;  // the trainer's (epoch, seed, strategy, ...)
  std::vector<CheckpointBlob> blobs;
  int format_version = 2;  // 1: the line format of round one, still read (never written)
};

// CRC-32 (IEEE, as zlib and gzip compute it), continuing from `crc` (0 to start).
[[nodiscard]] std::uint32_t crc32(std::span<const std::byte> bytes, std::uint32_t crc = 0) noexcept;

// Which checkpoints a write may remove once its own commit is durable: all but the newest
// `keep` of `owned` (the checkpoints this writer committed before, oldest first) and the new
// one. Nothing else under the root is ever removed, so the checkpoints of an earlier run, or
// of anyone else sharing the folder, survive whatever `keep` says.
struct CheckpointRetention {
  std::vector<std::filesystem::path> owned;
  std::size_t keep = 1;  // 0 counts as 1: the new checkpoint always stays
};

// Collective over `group`: every rank calls it with the same step and metadata. Writes
// root/step-<step> (zero-padded): rank 0 makes a temporary folder, each rank's `save` puts its
// blobs (each file fsync'ed), rank 0 writes the manifest, fsyncs, renames the folder into
// place, fsyncs root, points root/latest at it (same write-fsync-rename dance) and prunes as
// `retention` allows. Returns the committed folder on every rank, only once the commit is
// durable. Throws CheckpointError on an I/O failure on any rank: then neither a new folder
// nor a new `latest` is visible (an existing checkpoint of the same step is replaced only by
// a complete new one).
std::filesystem::path write_checkpoint(const std::filesystem::path& root, std::int64_t step,
                                       const std::map<std::string, std::string>& metadata,
                                       Communicator& group,
                                       const std::function<void(CheckpointWriter&)>& save,
                                       const CheckpointRetention& retention, Duration timeout);

// write_checkpoint's steps, for writers that agree on them without a communicator (an elastic
// run's survivors when no world of theirs can be formed agree through the job's store): the
// temporary folder root/`temporary_name` is prepared, each rank's blobs of a world of some size
// are written into it (by any process, several ranks by one), and once every rank's are there,
// one process commits: the manifest, the rename into root/step-<step>, `latest` and pruning, as
// write_checkpoint does. Each step throws CheckpointError (or the filesystem's error) on an I/O
// failure; nothing is visible under root/step-<step> before commit() returned.
class CheckpointParts {
 public:
  CheckpointParts(std::filesystem::path root, std::int64_t step, const std::string& temporary_name);

  [[nodiscard]] const std::filesystem::path& temporary() const noexcept { return temporary_; }
  [[nodiscard]] const std::filesystem::path& final_folder() const noexcept { return final_folder_; }
  // Makes the temporary folder, empty (what an earlier attempt left there is removed).
  void prepare() const;
  // Writes rank `rank`'s blobs through `save` (each file fsync'ed) and the list of them; makes
  // the temporary folder if it is not there.
  void write_rank(int rank, const std::function<void(CheckpointWriter&)>& save) const;
  // Reads the lists of ranks 0..world_size-1 (each must have been written) into the manifest
  // and commits. Throws CheckpointError for a blob two ranks wrote.
  std::filesystem::path commit(int world_size, const std::map<std::string, std::string>& metadata,
                               const CheckpointRetention& retention) const;

 private:
  std::filesystem::path root_;
  std::int64_t step_;
  std::filesystem::path final_folder_;
  std::filesystem::path temporary_;
};

// The checkpoint root/latest points at, or nullopt when there is none yet. Throws
// CheckpointError if `latest` names a folder that does not exist.
[[nodiscard]] std::optional<std::filesystem::path> latest_checkpoint(
    const std::filesystem::path& root);

// Committed checkpoints under root (folders named step-<digits>), oldest first.
[[nodiscard]] std::vector<std::filesystem::path> list_checkpoints(
    const std::filesystem::path& root);

// A checkpoint opened for reading. The constructor reads the manifest, checks that its fields
// add up (the step agrees with a step-<N> folder name, every blob belongs to a rank of the
// recorded world and that world's rank files are all there and no others) and verifies every
// blob's size and CRC-32, so a truncated, corrupted or inconsistent checkpoint is refused
// before anything is loaded from it: CheckpointError names the folder, the file and what is
// wrong.
// Thread-safety: const methods may be called concurrently.
class FileCheckpointReader final : public CheckpointReader {
 public:
  explicit FileCheckpointReader(std::filesystem::path folder);

  [[nodiscard]] std::vector<std::byte> get(const std::string& name) const override;
  [[nodiscard]] bool contains(const std::string& name) const override;
  [[nodiscard]] std::vector<StateSlice> slices() const override;
  [[nodiscard]] std::vector<float> slice_values(std::size_t index) const override;
  [[nodiscard]] int saved_world_size() const override { return manifest_.world_size; }

  [[nodiscard]] const CheckpointManifest& manifest() const noexcept { return manifest_; }
  [[nodiscard]] const std::filesystem::path& folder() const noexcept { return folder_; }

 private:
  [[nodiscard]] std::vector<std::byte> read_verified(const CheckpointBlob& blob) const;
  std::filesystem::path folder_;
  CheckpointManifest manifest_;
  std::vector<std::size_t> slice_blobs_;  // indices into manifest_.blobs, slices() order
};

// The checkpoint `--resume` continues from: the newest of list_checkpoints(root), opened and
// verified; nullptr when root holds none. `latest` is not consulted (a crash between a
// folder's rename and the pointer's update leaves a newer complete checkpoint). Throws
// CheckpointError when the newest does not verify, naming it, what is wrong and the older
// ones on disk: a damaged checkpoint is never passed over silently, nor overwritten later by
// a run that resumed from an older one.
[[nodiscard]] std::unique_ptr<FileCheckpointReader> open_newest_checkpoint(
    const std::filesystem::path& root);

}  // namespace tessera
