#pragma once
// What a strategy writes its state into and reads it back from: named byte blobs for this rank.
// The engine adds checksums, atomic renames and the manifest (tessera/runtime/checkpoint.hpp).

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace tessera {

class CheckpointWriter {
 public:
  virtual ~CheckpointWriter() = default;
  virtual void put(const std::string& name, std::span<const std::byte> bytes) = 0;
};
class CheckpointReader {
 public:
  virtual ~CheckpointReader() = default;
  [[nodiscard]] virtual std::vector<std::byte> get(const std::string& name) const = 0;
  [[nodiscard]] virtual bool contains(const std::string& name) const = 0;
  // World size the checkpoint was written at; strategies reshard when it differs.
  [[nodiscard]] virtual int saved_world_size() const = 0;
};

}  // namespace tessera
